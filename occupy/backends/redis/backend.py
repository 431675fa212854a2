"""``RedisBackend``: locks in Redis, through the raw client of a django-redis cache.

Each call is one round trip to one Redis primary: a Lua script (``redis_scripts``)
takes the key with its fence and queue in one step, and releases and extends
compare the token on the server. Redis expires claims itself, so nothing needs sweeping.
A value under a lock's key that occupy did not write (an older layout, another app's
value under a shared prefix, another type) is held by an unknown holder
(:data:`~occupy.backends.claims.UNKNOWN_OWNER`) until Redis expires it, never free;
``list_locks`` shows it under its Redis key's name.

What seed 004 gets wrong, and what this does instead: ``SETNX`` then ``EXPIRE`` is two
steps (a crash in between leaves a lock that never expires): here the claim and its
expiry are written by one script. The ``INCR`` variant force-unlocks by count: here
only the token's owner may release, and a lost lease is fenced out by its fence.

Waiting is first come, first served: a waiter joins the key's queue and blocks with
``BLPOP`` on its own wake-up list; a release hands the key to the oldest live waiter
and wakes it with the grant. A wake-up that never comes (the holder died, a failover)
costs at most ``POLL_INTERVAL``, or less when the holder's lease expires sooner.

An acquire's calls are held to its time left (:class:`BoundedCalls`), so a server that
stops answering ends it with ``StoreUnavailable`` instead of blocking it; a failing
server raises ``StoreUnavailable`` everywhere.

OPTIONS: ``CACHE`` (the django-redis cache alias, default ``"default"``), ``PREFIX``
(of every Redis key, default ``"occupy:"``), ``POLL_INTERVAL`` (longest block before a
waiter looks again and refreshes its place, default 0.25 s), ``QUEUE_TTL`` (how long a
waiter's place outlives its last look, default 3 s), ``FENCE_TTL`` (how long a key's
fence counter lives from its first grant, default one day; every fence is at least the
server's clock in µs, so a new counter starts above every fence before it). Needs
Redis 6.2 or later.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from django.core.checks import CheckMessage

from occupy.backends.base import STORE_GRACE, Attempt, BaseBackend, Claim
from occupy.backends.claims import UNKNOWN_OWNER
from occupy.backends.claims import text as _text  # replies: bytes or str
from occupy.backends.options import Option, missing_cache, where
from occupy.backends.redis import scripts as redis_scripts
from occupy.backends.redis.scripts import RedisKeys, redis_keys
from occupy.exceptions import InvalidBackendError
from occupy.leases import Holder, Lease, new_token

try:
    from django_redis import get_redis_connection
    from redis.exceptions import NoScriptError, RedisError, ResponseError
    from redis.exceptions import TimeoutError as RedisTimeoutError
except ImportError as e:  # pragma: no cover - depends on the installation
    raise InvalidBackendError(
        "occupy.backends.redis.RedisBackend needs django-redis: "
        "pip install 'django-occupy[redis]'."
    ) from e

__all__ = ["BoundedCalls", "RedisBackend", "RedisKeys"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The expiry shown for a foreign value that Redis never expires: 9999-12-31, in ms.
_NEVER_MS = 253402300799000
#: Async waiters block in threads of their own pool, never in the event loop's default
#: executor (which a few long ``BLPOP`` calls would starve).
_ASYNC_WAIT_THREADS = 64


class BoundedCalls:
    """Connections of the backend's own for the calls of an acquire, each bounded by
    the time it has left (redis-py's client has no per-call timeout: a server that
    stops answering blocks it up to the cache's socket timeout, by default for ever).

    Connecting, the handshake and the reply are each held to the bound; a connection
    whose call failed is dropped. Built only on a plain connection pool (not Sentinel's,
    not Redis Cluster): elsewhere calls are not bounded. A command the server had
    received before it stalled still runs when it resumes: a grant made so, after the
    caller gave up, holds the key until its ttl.
    """

    def __init__(self, pool: Any) -> None:
        self.connection_class = pool.connection_class
        self.kwargs = dict(pool.connection_kwargs)
        self.idle: list[Any] = []
        self.lock = threading.Lock()
        self.pid = os.getpid()

    @classmethod
    def of(cls, client: Any) -> BoundedCalls | None:
        """Return bounded calls to the server of ``client``, or ``None`` if it has no
        plain connection pool."""
        from redis import BlockingConnectionPool, ConnectionPool

        pool = getattr(client, "connection_pool", None)
        return cls(pool) if type(pool) in (ConnectionPool, BlockingConnectionPool) else None

    def __call__(self, bound: float, *command: Any) -> Any:
        """Run ``command``; raise redis-py's ``TimeoutError`` if it takes over ``bound``."""
        with self.lock:
            if self.pid != os.getpid():  # a forked child: the parent's sockets are not ours
                self.idle, self.pid = [], os.getpid()
            conn = self.idle.pop() if self.idle else None
        if conn is None:
            conn = self.connection_class(**self.kwargs)
        end = time.monotonic() + bound
        done = False
        try:
            # Connecting takes a connect and a handshake: half the bound each at most.
            conn.socket_connect_timeout = conn.socket_timeout = bound / 2
            try:  # as redis-py's pool does: a connection the server closed is made again
                if conn.can_read():
                    conn.disconnect()
            except (RedisError, OSError):
                conn.disconnect()
            conn.connect()  # at once if connected
            conn.send_command(*command)
            reply = conn.read_response(timeout=max(end - time.monotonic(), 0.001))
            done = True
            return reply
        finally:
            if done:
                with self.lock:
                    self.idle.append(conn)
            else:
                conn.disconnect()

    def close(self) -> None:
        """Close the idle connections."""
        with self.lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.disconnect()


class _Script:
    """A Lua script called with one key by ``EVALSHA``, through redis-py's script cache
    (``register_script``), loaded again if the server lost it (a restart, a failover).
    A call with a ``bound`` goes through :class:`BoundedCalls` where there are any."""

    __slots__ = ("bounded", "execute", "script", "sha")

    def __init__(self, client: Any, text: str, bounded: BoundedCalls | None) -> None:
        self.script = client.register_script(text)
        self.sha = self.script.sha
        self.execute = client.execute_command
        self.bounded = bounded

    def __call__(self, key: str, *args: Any, bound: float | None = None) -> Any:
        if bound is not None and self.bounded is not None:
            try:
                return self.bounded(bound, "EVALSHA", self.sha, 1, key, *args)
            except NoScriptError:
                return self.bounded(bound, "EVAL", self.script.script, 1, key, *args)
        try:
            return self.execute("EVALSHA", self.sha, 1, key, *args)
        except NoScriptError:
            return self.script([key], args)


class _Scripts(NamedTuple):
    acquire: _Script
    queue: _Script
    release: _Script
    extend: _Script
    resume: _Script
    takeover: _Script
    cancel: _Script


def to_datetime(ms: Any) -> datetime:
    """Return a server time in milliseconds as an aware UTC datetime."""
    return _EPOCH + timedelta(0, 0, 0, int(ms))


def to_ms(ttl: float, name: str = "ttl") -> int:
    """Return positive, finite seconds as whole milliseconds (at least one), else raise."""
    if not (isinstance(ttl, int | float) and math.isfinite(ttl) and ttl > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, not {ttl!r}.")
    return max(1, math.ceil(ttl * 1000))


class _Held(NamedTuple):
    """A holder's value in Redis (``redis_scripts``), without its token."""

    owner: str
    fence: int
    expires: int
    since: int
    key: str
    #: Whether the value is one occupy did not write (see :meth:`unknown`).
    foreign: bool = False

    @classmethod
    def parse(cls, value: Any, *, with_token: bool = True) -> _Held:
        """Parse ``"[<token> ]<flag><depth> <fence> <expires> <since> <owner>\\0<key>"``;
        ``ValueError`` if ``value`` is not one (occupy did not write it)."""
        try:
            text = _text(value)
            if with_token:
                text = text.split(" ", 1)[1]
            _depth, fence, expires, since, tail = text.split(" ", 4)
            owner, key = tail.split("\0", 1)
            return cls(owner, int(fence), int(expires), int(since), key)
        except (ValueError, IndexError) as e:  # UnicodeDecodeError is a ValueError
            raise ValueError(f"not a value occupy wrote: {value!r:.100}") from e

    @classmethod
    def unknown(cls, key: str, now_ms: int, pttl: int) -> _Held:
        """Return a value occupy did not write as held by :data:`UNKNOWN_OWNER` (fence
        0) until Redis expires it: ``pttl`` ms after ``now_ms``, or never (``-1``)."""
        expires = _NEVER_MS if pttl == -1 else now_ms + max(pttl, 0)
        return cls(UNKNOWN_OWNER, 0, expires, 0, key, foreign=True)

    def holder(self) -> Holder:
        """Return the public view: owner, expiry, fence, grant time."""
        return Holder(self.owner, to_datetime(self.expires), self.fence,
                      to_datetime(self.since))


def _prefix_problem(prefix: str) -> str | None:
    if "{" in prefix or "}" in prefix:
        return "must have no braces (they would pick the Redis Cluster slot)"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class RedisBackend(BaseBackend):
    """Locks in Redis; see the module docstring for the keys, options and guarantees."""

    options_schema = {
        "CACHE": Option(str, "default", "the django-redis cache alias",
                        check=lambda v: None if v else "must name a cache alias"),
        "PREFIX": Option(str, "occupy:", "what every key occupy writes starts with",
                         check=_prefix_problem),
        "POLL_INTERVAL": Option(float, 0.25, "longest pause between two looks while "
                                "waiting", positive=True),
        "QUEUE_TTL": Option(float, 3, "how long a waiter's place outlives its last look",
                            positive=True),
        "FENCE_TTL": Option(float, 86400, "how long a key's fence is remembered",
                            positive=True),
    }

    @classmethod
    def config_problems(cls, alias: str, params: Mapping[str, Any],
                        options: Mapping[str, Any]) -> list[str]:
        """Add: ``QUEUE_TTL`` must be at least twice ``POLL_INTERVAL``."""
        problems = super().config_problems(alias, params, options)
        queue_ttl, poll = options["QUEUE_TTL"], options["POLL_INTERVAL"]
        if _number(queue_ttl) and _number(poll) and queue_ttl < 2 * poll:
            problems.append(
                f"{where(alias, 'QUEUE_TTL')} ({queue_ttl:g} s) must be at least twice "
                f"POLL_INTERVAL ({poll:g} s), or live waiters lose their place.")
        return problems

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.E004``: ``OPTIONS["CACHE"]`` is not in ``settings.CACHES``."""
        cache = (params.get("OPTIONS") or {}).get("CACHE", "default")
        return super().check(alias, params) + missing_cache(alias, cache)

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.cache_alias: str = self.options["CACHE"]
        self.prefix: str = self.options["PREFIX"]
        self.poll_interval = float(self.options["POLL_INTERVAL"])
        self.queue_ttl = float(self.options["QUEUE_TTL"])
        self.fence_ttl = float(self.options["FENCE_TTL"])
        self._texts = redis_scripts.scripts_for(to_ms(self.fence_ttl), to_ms(self.queue_ttl))
        self._client: Any = None
        self._scripts: Any = None
        self._bounded: BoundedCalls | None = None
        self._longest_block = self.poll_interval
        self._executor: ThreadPoolExecutor | None = None
        self._executor_pid = 0
        self._executor_lock = threading.Lock()

    # --- connection ------------------------------------------------------------------
    @property
    def client(self) -> Any:
        """Return the raw redis-py client of the django-redis cache (built on first use)."""
        if self._client is None:
            self._connect()
        return self._client

    @property
    def scripts(self) -> _Scripts:
        """Return the Lua scripts, registered with the client (EVALSHA, loaded on demand)."""
        if self._scripts is None:
            self._connect()
        return self._scripts

    def drop_claim(self, key: str) -> None:
        """Delete the granted claim on ``key`` behind its holder's back (a test hook)."""
        self.client.delete(self.keys(key).lock)

    def _connect(self) -> None:
        from django.core.cache import InvalidCacheBackendError

        try:
            client = get_redis_connection(self.cache_alias, write=True)
        except InvalidCacheBackendError as e:
            raise InvalidBackendError(
                f"occupy backend {self.alias!r} uses cache {self.cache_alias!r}, which is not "
                f"in settings.CACHES: {e}"
            ) from e
        except NotImplementedError as e:
            raise InvalidBackendError(
                f"occupy backend {self.alias!r} needs a django-redis cache with one primary "
                f"(django_redis.cache.RedisCache, default or Sentinel client); cache "
                f"{self.cache_alias!r} gives no raw Redis client."
            ) from e
        self.bind(client)

    def bind(self, client: Any) -> None:
        """Use the raw redis-py ``client`` (normally the cache's; tests bind others)."""
        if self._bounded is not None:
            self._bounded.close()
        self._bounded = BoundedCalls.of(client)
        self._scripts = _Scripts(**{name: _Script(client, text, self._bounded)
                                    for name, text in self._texts.items()})
        # A BLPOP longer than the socket timeout would end in a TimeoutError.
        pool = getattr(client, "connection_pool", None)
        socket_timeout = getattr(pool, "connection_kwargs", {}).get("socket_timeout")
        if socket_timeout:
            self._longest_block = min(self.poll_interval, socket_timeout / 2)
        self._client = client

    def keys(self, key: str) -> RedisKeys:
        """Return the Redis keys that hold lock ``key``."""
        return redis_keys(self.prefix, key)

    def wait_executor(self) -> ThreadPoolExecutor:
        """Return this process's pool of threads for async waiters' blocking ``BLPOP``."""
        with self._executor_lock:
            if self._executor is None or self._executor_pid != os.getpid():
                self._executor = ThreadPoolExecutor(_ASYNC_WAIT_THREADS,
                                                    thread_name_prefix="occupy-redis-wait")
                self._executor_pid = os.getpid()
            return self._executor

    def close(self) -> None:
        """Stop the async waiters' threads; the connection pool belongs to django-redis."""
        with self._executor_lock:
            if self._executor is not None and self._executor_pid == os.getpid():
                self._executor.shutdown(wait=False)
            self._executor = None
        if self._bounded is not None:
            self._bounded.close()
        self._client = self._scripts = self._bounded = None

    # --- the contract -------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> RedisAttempt:
        """Return an attempt to take ``key`` (see :class:`RedisAttempt`)."""
        return RedisAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Undo one level of the lease; on the last, hand the key to the next waiter."""
        try:
            released = self.scripts.release(self.keys(lease.key).lock, lease.token)
        except RedisError as e:
            raise self.unavailable(lease.key, e) from e
        if not released:
            raise lease.mark_lost("it expired or was taken over before release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after the server's now."""
        ttl_ms = to_ms(ttl)
        try:
            expires = self.scripts.extend(self.keys(lease.key).lock, lease.token, ttl_ms)
        except RedisError as e:
            raise self.unavailable(lease.key, e) from e
        if expires is None:
            raise lease.mark_lost("it expired or was taken over before it was extended")
        lease.expires_at = to_datetime(expires)

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``: one script."""
        try:
            reply = self.scripts.resume(self.keys(key).lock, token, to_ms(ttl), int(deeper))
        except RedisError as e:
            raise self.unavailable(key, e) from e
        if reply is None:
            return None
        fence, expires, depth, tail = _text(reply).split(" ", 3)
        return Lease(key=key, owner=tail.split("\0", 1)[0], token=token, fence=int(fence),
                     expires_at=to_datetime(expires), ttl=ttl, using=self.alias,
                     depth=int(depth), backend=self)

    def takeover(self, key: str, owner: str, ttl: float) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it: one
        script. Return the lease and the holder replaced."""
        token = new_token()
        try:
            numbers, previous = self.scripts.takeover(self.keys(key).lock, token,
                                                      f"{owner}\0{key}", to_ms(ttl))
        except RedisError as e:
            raise self.unavailable(key, e) from e
        fence, expires, _since = _text(numbers).split(" ")
        lease = Lease(key=key, owner=owner, token=token, fence=int(fence),
                      expires_at=to_datetime(expires), ttl=ttl, using=self.alias,
                      backend=self)
        return lease, (_Held.parse(previous, with_token=False).holder() if previous else None)

    def holder(self, key: str) -> Holder | None:
        """Return the holder's owner, expiry and fence, or ``None`` (never the token).

        A value occupy did not write is held by :data:`~occupy.backends.claims.UNKNOWN_OWNER`
        (fence 0) until Redis expires it.
        """
        try:
            held = _read(self.client, self.keys(key).lock, key)
        except RedisError as e:
            raise self.unavailable(key, e) from e
        return None if held is None else held.holder()

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds the key."""
        try:
            value = self.client.get(self.keys(lease.key).lock)
        except ResponseError as e:
            if _wrong_type(e):
                return False  # another type under the key: not ours
            raise self.unavailable(lease.key, e) from e
        except RedisError as e:
            raise self.unavailable(lease.key, e) from e
        if isinstance(value, bytes):  # compared as bytes: a foreign value need not be UTF-8
            return value.startswith(f"{lease.token} ".encode())
        return value is not None and value.startswith(f"{lease.token} ")

    def sweep(self, *, batch_size: int = 1000, dry_run: bool = False) -> int:
        """Return 0: Redis expires claims, queue places and wake-up lists itself."""
        return 0

    def claims(self) -> Iterable[Claim]:
        """Yield holders (``using``) and live waiters (``pending``) by key, never tokens.

        A value occupy did not write is listed under its Redis key's name (the lock key
        it stands for cannot be known), held by
        :data:`~occupy.backends.claims.UNKNOWN_OWNER`, with no start and no fence.
        """
        client = self.client
        pattern = _glob_escape(self.prefix) + "{*}:"
        found: list[Claim] = []
        for name in client.scan_iter(match=pattern + "lock", count=1000):
            held = _read(client, name, None)
            if held is None:
                continue
            if held.foreign:
                found.append(Claim(_text(name), UNKNOWN_OWNER, "using", None,
                                   to_datetime(held.expires), None))
            else:
                found.append(Claim(held.key, held.owner, "using", to_datetime(held.since),
                                   to_datetime(held.expires), held.fence))
        now_ms = _server_ms(client)
        for name in client.scan_iter(match=pattern + "waiters", count=1000):
            found.extend(_waiting_claims(client, _text(name), now_ms))
        found.sort(key=lambda c: (c.key, c.state != "using", c.since or _EPOCH))
        return found


def _read(client: Any, name: Any, key: str | None) -> _Held | None:
    """Return the holder of lock key ``name`` (Redis's name; ``key``, the lock key, if
    known), one occupy did not write as :meth:`_Held.unknown`, or ``None`` if free."""
    try:
        value = client.get(name)
    except ResponseError as e:
        if not _wrong_type(e):
            raise
        value = b""  # another type: not ours
    if value is None:
        return None
    try:
        return _Held.parse(value)
    except ValueError:
        now_ms = _server_ms(client)
        return _Held.unknown(key if key is not None else _text(name), now_ms,
                             int(client.pttl(name)))


def _wrong_type(error: ResponseError) -> bool:
    return str(error).startswith("WRONGTYPE")


def _waiting_claims(client: Any, waiters: str, now_ms: int) -> list[Claim]:
    try:
        entries = {_text(k): _text(v) for k, v in client.hgetall(waiters).items()}
        arrivals = dict(client.zrange(waiters.removesuffix("waiters") + "queue", 0, -1,
                                      withscores=True))
    except ResponseError as e:  # another type under the name: no waiters of ours
        if not _wrong_type(e):
            raise
        return []
    claims = []
    for token, info in entries.items():
        try:
            deadline, _ttl, tail = info.split("|", 2)
            owner, key = tail.split("\0", 1)
            int(deadline)
        except ValueError:
            continue  # not a waiter occupy wrote; it expires with the hash (QUEUE_TTL)
        arrival = arrivals.get(token.encode()) or arrivals.get(token)
        if int(deadline) > now_ms and arrival is not None:
            claims.append(Claim(key, owner, "pending", to_datetime(arrival // 1000),
                                to_datetime(deadline), None))
    return claims


def _server_ms(client: Any) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisAttempt(Attempt):
    """One try at a key: one script per try; waiting blocks on the attempt's wake list."""

    def __init__(self, backend: RedisBackend, key: str, owner: str, ttl: float) -> None:
        super().__init__(backend, key, owner, ttl)
        self.backend: RedisBackend = backend
        self.rkeys = backend.keys(key)
        self.ttl_ms = to_ms(ttl)
        #: Owner and key as the scripts store them, one argument.
        self.tail = f"{owner}\0{key}"
        #: A grant handed over by a release, read from the wake-up list.
        self.handed: Lease | None = None
        self.queued = False
        #: The holder as the last refusal saw it, and the server's now then (ms).
        self.seen: tuple[_Held, int] | None = None

    def _run(self, mode: str) -> Lease | None:
        scripts = self.backend.scripts
        script = scripts.acquire if mode == "try" else scripts.queue
        try:
            reply = script(self.rkeys.lock, self.token, self.tail, self.ttl_ms,
                           bound=self.time_left())
        except RedisError as e:
            raise self.backend.unavailable(self.key, e) from e
        if isinstance(reply, list):
            now = int(reply[1])
            held = None
            if reply[0]:
                with suppress(ValueError):  # a value that only looks like ours: not UTF-8
                    held = _Held.parse(reply[0], with_token=False)
            if held is None:  # a value occupy did not write (redis_scripts: FOREIGN)
                held = _Held.unknown(self.key, now, int(reply[2]) if len(reply) > 2 else -1)
            self.seen = (held, now)
            return None
        fence, expires, _since, depth, token = _text(reply).split(" ")
        return self._lease(token, fence, expires, int(depth))

    def _lease(self, token: str, fence: Any, expires: Any, depth: int = 1) -> Lease:
        return Lease(key=self.key, owner=self.owner, token=token, fence=int(fence),
                     expires_at=to_datetime(expires), ttl=self.ttl, using=self.backend.alias,
                     depth=depth, backend=self.backend)

    def try_acquire(self) -> Lease | None:
        """Grant, or (once queued) keep this attempt's place in the queue."""
        if self.handed is not None:
            return self.handed
        return self._run("queue" if self.queued else "try")

    def enqueue(self) -> Lease | None:
        """Join the queue; if the key came free meanwhile, take it at once."""
        self.queued = True
        return self._run("queue")

    def next_delay(self) -> float:
        """Return how long to block: the poll interval, or until the holder expires."""
        longest = self.backend._longest_block
        if self.seen is None:
            return longest
        held, now = self.seen
        return min(longest, max(0.001, (held.expires - now) / 1000 + 0.002))

    def wait(self, seconds: float) -> None:
        """Block on this attempt's wake-up list until a release hands it the key."""
        if self.handed is not None:
            return
        name, block = self.rkeys.wake + self.token, round(max(seconds, 0.001), 3)
        bounded = self.backend._bounded if self.deadline is not None else None
        try:
            if bounded is None:
                reply = self.backend.client.blpop([name], timeout=block)
            else:
                reply = bounded(block + STORE_GRACE, "BLPOP", name, block)
        except RedisTimeoutError:
            return  # the next try looks again
        except RedisError as e:
            raise self.backend.unavailable(self.key, e) from e
        if reply:
            fence, expires, _since = _text(reply[1]).split(" ")
            self.handed = self._lease(self.token, fence, expires)

    async def await_wake(self, seconds: float) -> None:
        """Async twin of :meth:`wait`: block in the backend's own thread pool.

        A cancelled waiter's thread finishes its short ``BLPOP`` on its own; the
        cancellation has already removed everything it could be woken for.
        """
        if self.handed is not None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.backend.wait_executor(), self.wait, seconds)

    def cancel(self) -> None:
        """Leave the queue, drop the wake-up list, and give back a key handed over."""
        try:
            self.backend.scripts.cancel(self.rkeys.lock, self.token, bound=self.time_left())
        except RedisError as e:
            raise self.backend.unavailable(self.key, e) from e

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last refusal saw and its seconds left, by Redis's clock."""
        if self.seen is None:
            return None, None
        held, now = self.seen
        return held.holder(), (held.expires - now) / 1000
