"""occupy's one Redis lock protocol, bound to a raw redis-py client: :class:`RedisProtocol`.

The protocol is the scripts and key layout of :mod:`.scripts` and the
:class:`RedisAttempt` that drives them. A backend builds one on the client it has and
hands every operation of the contract to it: :class:`~occupy.backends.redis.RedisBackend`
on the client of a django-redis cache (``get_redis_connection``),
:class:`~occupy.backends.cache.CacheBackend` on the raw client of a Redis cache
(django-redis, or Django's own ``RedisCache``), under a prefix taken from the cache's
``make_key``. Either way, what the protocol guarantees is the same:

- Each operation is one script on one Redis primary: take (with its fence), release
  and extend compare the token on the server, so a late release or extend never
  touches the next holder. Redis expires claims itself; nothing needs sweeping.
- Fences are the server's ``TIME`` in microseconds, or one above the last fence if that
  is ahead: they rise across releases, expiry, restarts and a lost counter.
- Waiting is first come, first served: a waiter joins the key's queue and blocks with
  ``BLPOP`` on its own wake-up list; a release hands the key to the oldest live waiter
  and wakes it with the grant. A wake-up that never comes (the holder died, a failover)
  costs at most the poll interval, or less when the holder's lease expires sooner.
- Re-entry by token, takeover, resume, and listing the claims (``SCAN``) are scripts
  or reads of the same keys.
- A value under a lock's key that occupy did not write (an older layout, another app's
  value under a shared prefix, another type) is held by an unknown holder
  (:data:`~occupy.backends.claims.UNKNOWN_OWNER`) until Redis expires it, never free.
- An acquire's calls are held to its time left (:class:`~.calls.BoundedCalls`), so a
  server that stops answering ends it with ``StoreUnavailable`` instead of blocking
  it; a failing server raises ``StoreUnavailable`` (naming the backend and the key,
  from redis-py's error) from every operation.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from datetime import datetime, timezone
from typing import Any

from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from occupy.backends.base import STORE_GRACE, Attempt, BaseBackend, Claim
from occupy.backends.redis.calls import BoundedCalls, Scripts
from occupy.backends.redis.replication import Replication
from occupy.backends.redis.scripts import RedisKeys, redis_keys, scripts_for
from occupy.backends.redis.values import (
    Held,
    read_held,
    server_ms,
    text,
    to_datetime,
    to_ms,
    waiting_claims,
    wrong_type,
)
from occupy.exceptions import TakeoverRefused
from occupy.leases import Holder, Lease, new_token

__all__ = ["FENCE_TTL", "QUEUE_TTL", "RedisAttempt", "RedisProtocol"]

#: How long a key's fence counter lives from its first grant, in seconds (after that
#: the server's clock alone floors the next fence).
FENCE_TTL = 86400.0
#: How long a waiter's place in the queue outlives its last look, in seconds.
QUEUE_TTL = 3.0

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: Async waiters block in threads of their own pool, never in the event loop's default
#: executor (which a few long ``BLPOP`` calls would starve).
_ASYNC_WAIT_THREADS = 64


class RedisProtocol:
    """The Redis lock protocol on one raw redis-py ``client``, for ``backend``.

    ``backend`` is the backend whose contract this carries out: its leases and errors
    name it. Every Redis key starts with ``prefix``; the hash tag after it is
    ``digest_chars`` hex digits of the lock key's digest. A waiter blocks for at most
    ``poll_interval`` before it looks again; its place lives ``queue_ttl`` after its
    last look (at least twice ``poll_interval``); a key's fence counter lives
    ``fence_ttl`` from its first grant.
    """

    def __init__(
        self,
        backend: BaseBackend,
        client: Any,
        *,
        prefix: str,
        poll_interval: float,
        queue_ttl: float = QUEUE_TTL,
        fence_ttl: float = FENCE_TTL,
        digest_chars: int = 32,
        replication: Replication | None = None,
    ) -> None:
        self.backend = backend
        self.client = client
        self.prefix = prefix
        self.poll_interval = poll_interval
        self.digest_chars = digest_chars
        self.bounded = BoundedCalls.of(client)
        #: ``MIN_REPLICAS`` and ``REPLICAS`` (:mod:`.replication`).
        self.replication = replication or Replication()
        self.scripts = self.replication.wrap(
            client,
            Scripts.register(
                client,
                self.replication.texts(scripts_for(to_ms(fence_ttl), to_ms(queue_ttl))),
                self.bounded,
            ),
        )
        #: The longest ``BLPOP``: one longer than the socket timeout would end in a
        #: ``TimeoutError``.
        self.longest_block = poll_interval
        pool = getattr(client, "connection_pool", None)
        socket_timeout = getattr(pool, "connection_kwargs", {}).get("socket_timeout")
        if socket_timeout:
            self.longest_block = min(poll_interval, socket_timeout / 2)
        self._executor: ThreadPoolExecutor | None = None
        self._executor_pid = 0
        self._executor_lock = threading.Lock()

    def keys(self, key: str) -> RedisKeys:
        """Return the Redis keys that hold lock ``key``."""
        return redis_keys(self.prefix, key, self.digest_chars)

    def wait_executor(self) -> ThreadPoolExecutor:
        """Return this process's pool of threads for async waiters' blocking ``BLPOP``."""
        with self._executor_lock:
            if self._executor is None or self._executor_pid != os.getpid():
                self._executor = ThreadPoolExecutor(
                    _ASYNC_WAIT_THREADS, thread_name_prefix="occupy-redis-wait"
                )
                self._executor_pid = os.getpid()
            return self._executor

    def close(self) -> None:
        """Stop the async waiters' threads and close the bounded calls' connections; the
        client's own connection pool belongs to whoever made the client."""
        with self._executor_lock:
            if self._executor is not None and self._executor_pid == os.getpid():
                self._executor.shutdown(wait=False)
            self._executor = None
        if self.bounded is not None:
            self.bounded.close()

    # --- the contract, for the backend ---------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> RedisAttempt:
        """Return an attempt to take ``key`` (see :class:`RedisAttempt`)."""
        return RedisAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Undo one level of the lease; on the last, hand the key to the next waiter."""
        try:
            released = self.scripts.release(self.keys(lease.key).lock, lease.token)
        except RedisError as e:
            raise self.backend.unavailable(lease.key, e) from e
        if not released:
            raise lease.mark_lost("it expired or was taken over before release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after the server's now."""
        ttl_ms = to_ms(ttl)
        try:
            expires = self.scripts.extend(self.keys(lease.key).lock, lease.token, ttl_ms)
        except RedisError as e:
            raise self.backend.unavailable(lease.key, e) from e
        if expires is None:
            raise lease.mark_lost("it expired or was taken over before it was extended")
        lease.expires_at = to_datetime(expires)

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``: one script."""
        try:
            reply = self.scripts.resume(self.keys(key).lock, token, to_ms(ttl), int(deeper))
        except RedisError as e:
            raise self.backend.unavailable(key, e) from e
        if reply is None:
            return None
        fence, expires, depth, tail = text(reply).split(" ", 3)
        return self.backend.make_lease(
            key,
            owner=tail.split("\0", 1)[0],
            token=token,
            fence=int(fence),
            expires_at=to_datetime(expires),
            ttl=ttl,
            depth=int(depth),
        )

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it (only the
        grant with fence ``if_fence``, if given): one script. Return the lease and the
        holder replaced."""
        token = new_token()
        try:
            numbers, previous, *refused = self.scripts.takeover(
                self.keys(key).lock,
                token,
                f"{owner}\0{key}",
                to_ms(ttl),
                "" if if_fence is None else str(if_fence),
            )
        except RedisError as e:
            raise self.backend.unavailable(key, e) from e
        if numbers is None:
            assert if_fence is not None  # only a conditional takeover is refused
            raise self._refused(key, if_fence, previous, refused)
        fence, expires, _since = text(numbers).split(" ")
        lease = self.backend.make_lease(
            key,
            owner=owner,
            token=token,
            fence=int(fence),
            expires_at=to_datetime(expires),
            ttl=ttl,
        )
        return lease, (Held.parse(previous, with_token=False).holder() if previous else None)

    def _refused(
        self, key: str, if_fence: int, previous: Any, refused: list[Any]
    ) -> TakeoverRefused:
        """Return the error for a conditional takeover the script refused, naming the
        holder it found (see :data:`~occupy.backends.redis.scripts.TAKEOVER`)."""
        if previous is None:
            return self.backend.takeover_refused(key, if_fence, None, None)
        now_ms = int(refused[0])
        held = (
            Held.unknown(key, now_ms, int(refused[1]))
            if text(previous) == "?"
            else Held.parse(previous, with_token=False)
        )
        return self.backend.takeover_refused(
            key, if_fence, held.holder(), (held.expires - now_ms) / 1000
        )

    def holder(self, key: str) -> Holder | None:
        """Return the holder's owner, expiry and fence, or ``None`` (never the token).

        A value occupy did not write is held by :data:`~occupy.backends.claims.UNKNOWN_OWNER`
        (fence 0) until Redis expires it.
        """
        try:
            held = read_held(self.client, self.keys(key).lock, key)
        except RedisError as e:
            raise self.backend.unavailable(key, e) from e
        return None if held is None else held.holder()

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds the key."""
        try:
            value = self.client.get(self.keys(lease.key).lock)
        except ResponseError as e:
            if wrong_type(e):
                return False  # another type under the key: not ours
            raise self.backend.unavailable(lease.key, e) from e
        except RedisError as e:
            raise self.backend.unavailable(lease.key, e) from e
        if isinstance(value, bytes):  # compared as bytes: a foreign value need not be UTF-8
            return value.startswith(f"{lease.token} ".encode())
        return value is not None and str(value).startswith(f"{lease.token} ")

    def claims(self) -> list[Claim]:
        """Return holders (``using``) and live waiters (``pending``) by key, never tokens.

        A value occupy did not write is listed under its Redis key's name (the lock key
        it stands for cannot be known), held by
        :data:`~occupy.backends.claims.UNKNOWN_OWNER`, with no start and no fence.
        """
        try:
            found = self._claims()
        except RedisError as e:
            raise self.backend.unavailable(None, e) from e
        found.sort(key=lambda c: (c.key, c.state != "using", c.since or _EPOCH))
        return found

    def _claims(self) -> list[Claim]:
        client = self.client
        pattern = _glob_escape(self.prefix) + "{*}:"
        found: list[Claim] = []
        for name in client.scan_iter(match=pattern + "lock", count=1000):
            held = read_held(client, name, None)
            if held is not None:
                found.append(held.claim(name))
        now_ms = server_ms(client)
        for name in client.scan_iter(match=pattern + "waiters", count=1000):
            found.extend(waiting_claims(client, text(name), now_ms))
        return found

    def drop_claim(self, key: str) -> None:
        """Delete the granted claim on ``key`` behind its holder's back (a test hook)."""
        self.client.delete(self.keys(key).lock)


def _glob_escape(pattern: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in pattern)


class RedisAttempt(Attempt):
    """One try at a key: one script per try; waiting blocks on the attempt's wake list."""

    def __init__(self, protocol: RedisProtocol, key: str, owner: str, ttl: float) -> None:
        super().__init__(protocol.backend, key, owner, ttl)
        self.protocol = protocol
        self.rkeys = protocol.keys(key)
        self.ttl_ms = to_ms(ttl)
        #: Owner and key as the scripts store them, one argument.
        self.tail = f"{owner}\0{key}"
        #: A grant handed over by a release, read from the wake-up list.
        self.handed: Lease | None = None
        self.queued = False
        #: The holder as the last refusal saw it, and the server's now then (ms).
        self.seen: tuple[Held, int] | None = None

    def _run(self, mode: str) -> Lease | None:
        scripts = self.protocol.scripts
        script = scripts.acquire if mode == "try" else scripts.queue
        try:
            reply = script(
                self.rkeys.lock, self.token, self.tail, self.ttl_ms, bound=self.time_left()
            )
        except RedisError as e:
            raise self.backend.unavailable(self.key, e) from e
        if isinstance(reply, list):
            now = int(reply[1])
            held = None
            if reply[0]:
                with suppress(ValueError):  # a value that only looks like ours: not UTF-8
                    held = Held.parse(reply[0], with_token=False)
            if held is None:  # a value occupy did not write (scripts: FOREIGN)
                held = Held.unknown(self.key, now, int(reply[2]) if len(reply) > 2 else -1)
            self.seen = (held, now)
            return None
        fence, expires, _since, depth, token = text(reply).split(" ")
        return self._lease(token, fence, expires, int(depth))

    def _lease(self, token: str, fence: Any, expires: Any, depth: int = 1) -> Lease:
        return self.backend.make_lease(
            self.key,
            owner=self.owner,
            token=token,
            fence=int(fence),
            expires_at=to_datetime(expires),
            ttl=self.ttl,
            depth=depth,
        )

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
        longest = self.protocol.longest_block
        if self.seen is None:
            return longest
        held, now = self.seen
        return min(longest, max(0.001, (held.expires - now) / 1000 + 0.002))

    def wait(self, seconds: float) -> None:
        """Block on this attempt's wake-up list until a release hands it the key."""
        if self.handed is not None:
            return
        name, block = self.rkeys.wake + self.token, round(max(seconds, 0.001), 3)
        bounded = self.protocol.bounded if self.deadline is not None else None
        try:
            if bounded is None:
                reply = self.protocol.client.blpop([name], timeout=block)
            else:
                reply = bounded(block + STORE_GRACE, "BLPOP", name, block)
        except RedisTimeoutError:
            return  # the next try looks again
        except RedisError as e:
            raise self.backend.unavailable(self.key, e) from e
        if reply:
            fence, expires, _since = text(reply[1]).split(" ")
            self.handed = self._lease(self.token, fence, expires)
            try:  # with REPLICAS, the handover must have reached the replicas
                self.protocol.replication.confirm_handover(
                    self.protocol.scripts, self.rkeys.lock, self.token, self.ttl_ms
                )
            except RedisError as e:
                raise self.backend.unavailable(self.key, e) from e

    async def await_wake(self, seconds: float) -> None:
        """Async twin of :meth:`wait`: block in the protocol's own thread pool.

        A cancelled waiter's thread finishes its short ``BLPOP`` on its own; the
        cancellation has already removed everything it could be woken for.
        """
        if self.handed is not None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.protocol.wait_executor(), self.wait, seconds)

    def cancel(self) -> None:
        """Leave the queue, drop the wake-up list, and give back a key handed over."""
        try:
            self.protocol.scripts.cancel(self.rkeys.lock, self.token, bound=self.time_left())
        except RedisError as e:
            raise self.backend.unavailable(self.key, e) from e

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last refusal saw and its seconds left, by Redis's clock."""
        if self.seen is None:
            return None, None
        held, now = self.seen
        return held.holder(), (held.expires - now) / 1000
