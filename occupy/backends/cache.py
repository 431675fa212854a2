"""``CacheBackend``: locks on a Django cache, seed 003's ``CacheLock`` made correct.

The seed takes a lock with ``cache.add(key, uuid4(), expires)`` and releases it with a
``get`` then a ``delete``. What it gets wrong, and what this does instead:

- Its release reads, then deletes in a second round trip: if the lock expired in
  between and someone else took it, it deletes their lock. On a Redis cache
  (django-redis, or Django's own ``RedisCache``) every step here is one Lua script on
  the server (:mod:`occupy.backends.cache_scripts`): release and extend compare the
  token atomically, and time is the server's. Django's cache API has no compare-and-set,
  so on any other cache release and extend stay a read then a write; this narrows the
  race to a *safety margin* (below) and documents it, see :class:`CacheStore`.
- It waits with ``sleep(1)`` and counts tries, not time. Here the base class waits with
  a short capped backoff (``POLL_INTERVAL``) up to a monotonic deadline.
- It has no reentrancy, holder or fencing token. The entry here records the owner, a
  depth (the context holding the lease re-enters it by its token, see
  ``occupy.reentry``), the expiry, and a fence from a per-key counter floored by the
  clock, so it strictly increases across releases, expiry and restarts.

A cache that cannot lock across processes is refused: ``DummyCache`` (stores nothing)
always, ``LocMemCache`` (one process's memory) unless ``OPTIONS["SINGLE_PROCESS"]`` says
the deployment is one process. The system checks report the same (``occupy.E005``),
and warn about the file and database caches, whose ``add`` is not atomic (``W002``).

OPTIONS: ``CACHE`` (the cache alias, default ``"default"``), ``SINGLE_PROCESS`` (default
``False``), ``POLL_INTERVAL`` (longest pause between two tries while waiting, default
0.05 s), ``SAFETY_MARGIN`` (non-Redis caches only, default 0.1 s; see :class:`CacheStore`).
Waiters are not queued: whoever polls first after a release wins.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.cache import InvalidCacheBackendError, caches
from django.core.checks import CheckMessage, Error, Warning
from django.utils.module_loading import import_string

from occupy.backends.base import Attempt, BaseBackend, Claim
from occupy.backends.cache_scripts import FENCE_MEMORY_MS, LuaStore, Outcome, names
from occupy.backends.claims import Entry, from_us, now_us
from occupy.backends.options import Option, missing_cache, where
from occupy.exceptions import InvalidBackendError
from occupy.leases import Holder, Lease, new_token

__all__ = ["ATOMIC", "NO_STORE", "ONE_PROCESS", "RACY_ADD", "REDIS", "CacheBackend",
           "CacheStore", "cache_safety"]

logger = logging.getLogger("occupy.backends.cache")

#: What a cache class can do for a lock (see :func:`cache_safety`).
REDIS = "redis"  # atomic add, and scripts for atomic release and extend
ATOMIC = "atomic"  # atomic add across processes (memcached); release reads then writes
RACY_ADD = "racy-add"  # add is a read then a write: two processes can both win
ONE_PROCESS = "one-process"  # lives in one process's memory
NO_STORE = "no-store"  # stores nothing: every add succeeds

_KINDS = [
    ("django_redis.cache.RedisCache", REDIS),
    ("django.core.cache.backends.redis.RedisCache", REDIS),
    ("django.core.cache.backends.dummy.DummyCache", NO_STORE),
    ("django.core.cache.backends.locmem.LocMemCache", ONE_PROCESS),
    ("django.core.cache.backends.filebased.FileBasedCache", RACY_ADD),
    ("django.core.cache.backends.db.DatabaseCache", RACY_ADD),
]


def _store_errors() -> tuple[type[BaseException], ...]:
    """Return the errors by which a cache client says its server cannot be reached or used
    (those of the clients installed here)."""
    errors: list[type[BaseException]] = [OSError]
    for path in ("redis.exceptions.RedisError", "django_redis.exceptions.ConnectionInterrupted",
                 "pymemcache.exceptions.MemcacheError", "pylibmc.Error"):
        try:
            errors.append(import_string(path))
        except ImportError:
            continue
    return tuple(errors)


def cache_safety(cache_class: type | str) -> str:
    """Return what the cache class (or its dotted path) can do for a lock: one of
    :data:`REDIS`, :data:`ATOMIC`, :data:`RACY_ADD`, :data:`ONE_PROCESS`, :data:`NO_STORE`.

    Classes occupy does not know are taken to have an atomic ``add`` (memcached does).
    """
    if isinstance(cache_class, str):
        cache_class = import_string(cache_class)
    for path, kind in _KINDS:
        try:
            known = import_string(path)
        except ImportError:  # django-redis not installed
            continue
        if issubclass(cache_class, known):
            return kind
    return ATOMIC


def _redis_client(cache: Any) -> Any | None:
    """Return the raw redis-py client of a Redis cache, or ``None`` for other caches."""
    try:
        from django_redis.cache import RedisCache as DjangoRedisCache
        from django_redis.client import DefaultClient, ShardClient
    except ImportError:
        DjangoRedisCache = None
    if DjangoRedisCache is not None and isinstance(cache, DjangoRedisCache):
        client = cache.client
        # A sharded client spreads keys over servers: a script may not span them.
        if isinstance(client, DefaultClient) and not isinstance(client, ShardClient):
            return client.get_client(write=True)
        return None
    from django.core.cache.backends.redis import RedisCache

    if isinstance(cache, RedisCache):
        return cache._cache.get_client(write=True)  # the primary; scripts write
    return None


class CacheStore:
    """The lock on any Django cache, through ``add``, ``get``, ``set`` and ``delete``.

    ``add`` is the only atomic step Django's cache API offers; there is no
    compare-and-set. So after ``add`` (to record the fence) and in release, re-entry and
    extend, this reads the entry, compares the token, then writes or deletes. The write
    is only made if the entry read still had more than ``margin`` seconds to live and
    the write goes out before that much time has passed since the read; otherwise the
    entry is left to expire by itself (release) or the lease is reported lost (extend).
    What remains: a process stalled for longer than the margin *between* that check and
    its write (a long GC pause, a swapped-out process, a cache that evicts early) can
    still overwrite or delete the next holder's entry, and a fence counter written by
    such a process can go down (the clock floor keeps fences rising in practice). On
    memcached-like caches, keep ``ttl`` well above the margin and the margin well above
    a round trip. Time is this host's clock: hosts sharing a cache must keep their
    clocks in step (NTP).
    """

    atomic = False

    def __init__(self, alias: str, margin: float) -> None:
        self.alias = alias
        self.margin = margin
        cache = caches[alias]
        # memcached stores whole seconds and turns 0 into "expire now": round up, so a
        # lease never ends early (its entry may live up to a second longer than asked).
        self.whole_seconds = type(cache).__module__.endswith("memcached")

    @property
    def cache(self) -> Any:
        return caches[self.alias]  # one instance per thread, as Django hands them out

    def _timeout(self, expires_us: int) -> float:
        seconds = max(expires_us - now_us(), 1) / 1e6
        return math.ceil(seconds) if self.whole_seconds else seconds

    def _in_time(self, since: float, remaining: float, ttl: float) -> bool:
        """Return whether a write may still go out for an entry read at ``since``
        (monotonic) with ``remaining`` seconds to live."""
        return time.monotonic() - since < remaining - min(self.margin, ttl / 4)

    def _get(self, name: str) -> Entry | None:
        value = self.cache.get(name)
        return None if value is None else Entry._make(value)

    def grant(self, key: str, owner: str, token: str, ttl: float) -> Outcome:
        """Grant ``key`` if it is free, else report who holds it."""
        entry_name, fence_name = names(key)
        cache = self.cache
        started = time.monotonic()
        now = now_us()
        entry = Entry(token, owner, 0, 1, now + round(ttl * 1e6), now, key)
        if cache.add(entry_name, tuple(entry), self._timeout(entry.expires_us)):
            entry = entry._replace(fence=self._next_fence(cache, fence_name, now))
            if not self._in_time(started, ttl, ttl):
                return Outcome(None, None, now)  # it may have expired meanwhile: let it go
            cache.set(entry_name, tuple(entry), self._timeout(entry.expires_us))
            return Outcome(entry, None, now)
        current = self._get(entry_name)
        now = now_us()
        if current is None or not current.live(now):
            return Outcome(None, None, now)  # gone or going: the next try may have it
        return Outcome(None, current, now)

    def resume(self, key: str, token: str, ttl: float, levels: int) -> Entry | None:
        """Add ``levels`` to ``token``'s grant and keep it at least ``ttl`` more; return
        the entry, or ``None`` if the token does not hold ``key`` or the entry is too
        close to its expiry to be written safely (then it is left to expire)."""
        found = self._writable(key, token, ttl)
        if found is None:
            return None
        entry_name, current, now = found
        entry = current._replace(depth=current.depth + levels,
                                 expires_us=max(current.expires_us, now + round(ttl * 1e6)))
        self.cache.set(entry_name, tuple(entry), self._timeout(entry.expires_us))
        return entry

    def takeover(self, key: str, owner: str, token: str,
                 ttl: float) -> tuple[Entry, Entry | None]:
        """Grant ``key`` to ``token`` whoever holds it, with a higher fence; return the
        grant and the live entry it replaced, if any. A read then a write, like release
        on these caches: two takeovers at the same moment can both think they won,
        and the later write holds the key (both fences still rise)."""
        entry_name, fence_name = names(key)
        cache = self.cache
        previous = self.holder(key)
        now = now_us()
        fence = self._next_fence(cache, fence_name, now)
        entry = Entry(token, owner, fence, 1, now + round(ttl * 1e6), now, key)
        cache.set(entry_name, tuple(entry), self._timeout(entry.expires_us))
        return entry, None if previous is None else previous[0]

    def _writable(self, key: str, token: str, ttl: float) -> tuple[str, Entry, int] | None:
        """Return ``key``'s entry name, its entry and now if ``token`` holds it with
        enough time left to write it safely (see the class docstring), else ``None``."""
        entry_name = names(key).entry
        read_at = time.monotonic()
        current = self._get(entry_name)
        now = now_us()
        if current is None or current.token != token or not current.live(now):
            return None
        if not self._in_time(read_at, (current.expires_us - now) / 1e6, ttl):
            logger.warning("%r had less than the safety margin left: not written", key)
            return None
        return entry_name, current, now

    def _next_fence(self, cache: Any, name: str, now: int) -> int:
        # Only the holder writes the counter, so a read then a write is serialized by the
        # lock itself; the clock floor covers a counter the cache evicted or lost.
        fence = max(int(cache.get(name) or 0) + 1, now)
        cache.set(name, fence, FENCE_MEMORY_MS / 1000)
        return fence

    def release(self, key: str, token: str, ttl: float) -> int:
        """Undo one level of ``token``'s grant: -1 if not held, else the depth left."""
        entry_name = names(key).entry
        read_at = time.monotonic()
        current = self._get(entry_name)
        now = now_us()
        if current is None or current.token != token or not current.live(now):
            return -1
        in_time = self._in_time(read_at, (current.expires_us - now) / 1e6, ttl)
        if current.depth > 1:
            if in_time:  # else it expires before anyone could use the lower depth
                self.cache.set(entry_name, tuple(current._replace(depth=current.depth - 1)),
                               self._timeout(current.expires_us))
            return current.depth - 1
        if in_time:
            self.cache.delete(entry_name)
        return 0

    def extend(self, key: str, token: str, ttl: float) -> int | None:
        """Move the grant's expiry to ``ttl`` after now; ``None`` if it cannot."""
        found = self._writable(key, token, ttl)
        if found is None:
            return None
        entry_name, current, now = found
        entry = current._replace(expires_us=now + round(ttl * 1e6))
        self.cache.set(entry_name, tuple(entry), self._timeout(entry.expires_us))
        return entry.expires_us

    def holder(self, key: str) -> tuple[Entry, int] | None:
        """Return the live entry holding ``key`` and this host's now."""
        current = self._get(names(key).entry)
        now = now_us()
        return (current, now) if current is not None and current.live(now) else None

    def is_held(self, key: str, token: str) -> bool:
        """Return whether ``token`` holds ``key`` unexpired."""
        found = self.holder(key)
        return found is not None and found[0].token == token

    def forget(self, key: str, token: str, ttl: float) -> None:
        """Delete ``key``'s entry if ``token`` holds it (a grant whose caller gave up)."""
        if self.is_held(key, token):
            self.release(key, token, ttl)

    def entries(self) -> Iterable[Entry]:
        """Refuse: Django's cache API cannot enumerate keys."""
        raise NotImplementedError(
            f"occupy cannot list the locks on cache {self.alias!r} "
            f"({type(self.cache).__name__}): Django's cache API cannot enumerate keys "
            "(only Redis caches can). Ask occupy.holder(key) about one key instead."
        )


class CacheBackend(BaseBackend):
    """Locks stored as entries in a Django cache (see the module docstring)."""

    store_errors = _store_errors()
    options_schema = {
        "CACHE": Option(str, "default", "the cache alias"),
        "SINGLE_PROCESS": Option(bool, False, "the deployment is one process (LocMemCache)"),
        "POLL_INTERVAL": Option(float, 0.05, "longest pause between two tries while "
                                "waiting", positive=True),
        "SAFETY_MARGIN": Option(float, 0.1, "non-Redis caches: how much life an entry read "
                                "must have left for a write after it", positive=True),
    }

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.E004`` (the cache is not configured), ``occupy.E005`` (it cannot
        lock across processes) and ``occupy.W002`` (its ``add`` is a read then a write)."""
        options = params.get("OPTIONS") or {}
        cache = options.get("CACHE", "default")
        messages = super().check(alias, params) + missing_cache(alias, cache)
        if not isinstance(cache, str) or cache not in caches.settings:
            return messages
        path = caches.settings[cache].get("BACKEND", "")
        try:
            kind = cache_safety(path)
        except ImportError:
            return messages  # Django's own cache checks report an unimportable cache
        cache_class = import_string(path)
        if kind == NO_STORE or (kind == ONE_PROCESS and not options.get("SINGLE_PROCESS")):
            hint = ("Put the locks on a shared cache (Redis, memcached), or use "
                    "occupy.backends.db.DatabaseBackend.")
            if kind == ONE_PROCESS:
                hint += (" If this deployment really is one process, set "
                         "OPTIONS['SINGLE_PROCESS'] = True.")
            messages.append(Error(_refusal(alias, cache, cache_class, kind), hint=hint,
                                  obj=where(alias), id="occupy.E005"))
        elif kind == RACY_ADD:
            messages.append(Warning(
                f"occupy backend {alias!r} uses cache {cache!r} ({path}), whose add() is a "
                "read then a write: two processes can both take a free key.",
                hint="Put the locks on a Redis or memcached cache, or use "
                "occupy.backends.db.DatabaseBackend or occupy.backends.file.FileBackend.",
                obj=where(alias), id="occupy.W002",
            ))
        return messages

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.cache_alias: str = self.options["CACHE"]
        self.single_process: bool = self.options["SINGLE_PROCESS"]
        self.poll_interval = float(self.options["POLL_INTERVAL"])
        self.margin = float(self.options["SAFETY_MARGIN"])
        try:
            cache = caches[self.cache_alias]
        except InvalidCacheBackendError as e:
            raise InvalidBackendError(
                f"occupy backend {alias!r} uses cache {self.cache_alias!r}, which is not "
                f"in settings.CACHES: {e}"
            ) from e
        kind = cache_safety(type(cache))
        if kind == NO_STORE or (kind == ONE_PROCESS and not self.single_process):
            raise InvalidBackendError(_refusal(alias, self.cache_alias, type(cache), kind))
        client = _redis_client(cache)
        self.store: LuaStore | CacheStore = (
            LuaStore(client, cache.make_key) if client is not None
            else CacheStore(self.cache_alias, self.margin)
        )

    def drop_claim(self, key: str) -> None:
        """Delete the granted claim on ``key`` behind its holder's back (a test hook)."""
        caches[self.cache_alias].delete(self.lock_name(key))

    def lock_name(self, key: str) -> str:
        """Return the cache key (before the cache's own ``make_key``) of ``key``'s entry."""
        return names(key).entry

    def _lease(self, key: str, owner: str, ttl: float, entry: Entry) -> Lease:
        return Lease(key=key, owner=owner, token=entry.token, fence=entry.fence,
                     expires_at=from_us(entry.expires_us), ttl=ttl, using=self.alias,
                     depth=entry.depth, backend=self)

    # --- the contract -------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> CacheAttempt:
        """Return an attempt to take ``key`` (see :class:`CacheAttempt`)."""
        return CacheAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Undo one level of the lease; raise ``LeaseLost`` if it was no longer held."""
        with self.reaching(lease.key):
            depth = self.store.release(lease.key, lease.token, lease.ttl)
        if depth < 0:
            raise lease.mark_lost("it expired or was taken over before release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after now (the Redis server's now)."""
        with self.reaching(lease.key):
            expires = self.store.extend(lease.key, lease.token, ttl)
        if expires is None:
            raise lease.mark_lost("it expired or was taken over before it was extended")
        lease.expires_at = from_us(expires)

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``."""
        entry = self.store.resume(key, token, ttl, int(deeper))
        return None if entry is None else self._lease(key, entry.owner, ttl, entry)

    def takeover(self, key: str, owner: str, ttl: float) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it (one
        script on Redis caches); return the lease and the holder replaced."""
        entry, previous = self.store.takeover(key, owner, new_token(), ttl)
        return (self._lease(key, owner, ttl, entry),
                None if previous is None else _holder(previous))

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` (owner, expiry, fence; never the token), or ``None``."""
        with self.reaching(key):
            found = self.store.holder(key)
        return None if found is None else _holder(found[0])

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds its key."""
        with self.reaching(lease.key):
            return self.store.is_held(lease.key, lease.token)

    def sweep(self, *, batch_size: int = 1000, dry_run: bool = False) -> int:
        """Return 0: the cache expires entries itself."""
        return 0

    def claims(self) -> Iterable[Claim]:
        """Yield the granted entries, ordered by key (Redis caches only)."""
        with self.reaching(None):
            entries = sorted(self.store.entries(), key=lambda e: e.key)
        for e in entries:
            yield Claim(e.key, e.owner, "using", from_us(e.since_us), from_us(e.expires_us),
                        e.fence)


def _holder(entry: Entry) -> Holder:
    return Holder(owner=entry.owner, expires_at=from_us(entry.expires_us), fence=entry.fence,
                  since=from_us(entry.since_us))


def _refusal(alias: str, cache_alias: str, cache_class: type, kind: str) -> str:
    """Return why a cache cannot hold ``alias``'s locks, and the fix."""
    name = f"{cache_class.__module__}.{cache_class.__qualname__}"
    if kind == NO_STORE:
        return (f"occupy backend {alias!r} uses cache {cache_alias!r} ({name}), which stores "
                "nothing, so it cannot lock even within one process. Use a Redis or "
                "memcached cache, or occupy's DatabaseBackend.")
    return (f"occupy backend {alias!r} uses cache {cache_alias!r} ({name}), which lives in "
            "one process's memory, so other processes cannot see its locks. Use a shared "
            "cache (Redis, memcached), or set OPTIONS['SINGLE_PROCESS'] = True if this "
            "deployment really is one process.")


class CacheAttempt(Attempt):
    """One try at a key: ``add`` (or the Redis script) each time; waiters poll."""

    def __init__(self, backend: CacheBackend, key: str, owner: str, ttl: float) -> None:
        super().__init__(backend, key, owner, ttl)
        self.backend: CacheBackend = backend
        self.max_delay = backend.poll_interval
        self.seen: Outcome | None = None
        self.in_doubt = False

    def try_acquire(self) -> Lease | None:
        """Grant the key if it is free; else remember the holder."""
        self.in_doubt = True  # until the store answers, a grant may have been made
        with self.backend.reaching(self.key):
            outcome = self.backend.store.grant(self.key, self.owner, self.token, self.ttl)
        self.in_doubt = False
        if outcome.granted is not None:
            return self.backend._lease(self.key, self.owner, self.ttl, outcome.granted)
        self.seen = outcome
        return None

    def cancel(self) -> None:
        """Delete a grant this attempt may have made without hearing about it."""
        if not self.in_doubt:
            return
        try:
            self.backend.store.forget(self.key, self.token, self.ttl)
        except Exception:  # the error being raised already says what went wrong
            logger.warning("could not clear a possible grant of %r", self.key, exc_info=True)

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last try saw and its seconds left, for the error."""
        if self.seen is None or self.seen.holder is None:
            with self.backend.reaching(self.key):
                found = self.backend.store.holder(self.key)
            if found is None:
                return None, None
            entry, now = found
        else:
            entry, now = self.seen.holder, self.seen.now_us
        return _holder(entry), max(0.0, (entry.expires_us - now) / 1e6)
