"""``CacheBackend``: locks on a Django cache.

Every lease has an owner, a token, a fence that strictly increases
for its key, and a depth (the context holding it re-enters by its token, see
``occupy.reentry``); waiting is bounded by a monotonic deadline. How the cache holds
them depends on what it can do:

- **A Redis cache** (django-redis with one primary, or Django's own ``RedisCache``):
  every operation is occupy's one Redis lock protocol
  (:class:`~occupy.backends.cache.redis_cache.RedisCacheBackend` is a
  :class:`~occupy.backends.redis.protocol.RedisLockBackend`), the very scripts
  :class:`~occupy.backends.redis.RedisBackend` runs, on the cache's raw client. So it
  has the Redis backend's guarantees: one script per step, release and extend
  comparing the token on the server; fences floored by the server's ``TIME``;
  first-come-first-served waiting (a release hands the key to the oldest waiter,
  blocked on ``BLPOP`` for at most ``POLL_INTERVAL`` before it looks again); re-entry
  by token, takeover, resume, and ``list_locks``. Its Redis keys are
  ``make_key("occupy:")`` followed by ``{<SHA-256 of the key>}:lock`` (and ``:fence``,
  ``:queue``, ``:waiters``, ``:wake:<token>``), so the cache's ``KEY_PREFIX`` and
  ``VERSION`` apply and each lock's keys share one Redis Cluster slot.
  ``SAFETY_MARGIN`` is ignored: nothing is read then written.
- **Any other cache** (memcached, and the file, database and local-memory caches):
  Django's cache API has ``add`` but no compare-and-set, so release and extend read,
  compare, then write, within a *safety margin*; fences and expiry follow this host's
  clock; waiters poll, and whoever polls first after a release wins; claims cannot be
  listed (:class:`~occupy.backends.cache.add.AddCacheBackend`).
  :mod:`occupy.backends.cache.store` states what remains of the race.

Building a ``CacheBackend`` picks one of those two classes for the cache it is given,
as Django picks a cache class: each is a ``CacheBackend``.

A cache that cannot lock across processes is refused: ``DummyCache`` (stores nothing)
always, ``LocMemCache`` (one process's memory) unless ``OPTIONS["SINGLE_PROCESS"]`` says
the deployment is one process. The system checks report the same (``occupy.E005``),
and warn about the file and database caches, whose ``add`` is not atomic (``W002``).
A cache server that cannot be reached raises ``StoreUnavailable`` on either path.

OPTIONS: ``CACHE`` (the cache alias, default ``"default"``), ``SINGLE_PROCESS`` (default
``False``), ``POLL_INTERVAL`` (longest pause between two looks while waiting, default
0.05 s), ``SAFETY_MARGIN`` (non-Redis caches only, default 0.1 s).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.cache import InvalidCacheBackendError, caches
from django.core.checks import CheckMessage, Error, Warning
from django.utils.module_loading import import_string

from occupy.backends.base import BaseBackend
from occupy.backends.cache.store import FenceUnavailable
from occupy.backends.options import Option, cache_store, missing_cache, where
from occupy.backends.replicas import REPLICA_OPTIONS, client_warnings
from occupy.exceptions import InvalidBackendError

__all__ = [
    "ATOMIC",
    "NO_STORE",
    "ONE_PROCESS",
    "RACY_ADD",
    "REDIS",
    "CacheBackend",
    "cache_safety",
    "redis_client",
]

#: What a cache class can do for a lock (see :func:`cache_safety`).
REDIS = "redis"  # the Redis lock protocol on the cache's raw client
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
    errors: list[type[BaseException]] = [OSError, FenceUnavailable]
    for path in (
        "redis.exceptions.RedisError",
        "django_redis.exceptions.ConnectionInterrupted",
        "pymemcache.exceptions.MemcacheError",
        "pylibmc.Error",
    ):
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
    cls: type = import_string(cache_class) if isinstance(cache_class, str) else cache_class
    for path, kind in _KINDS:
        try:
            known = import_string(path)
        except ImportError:  # django-redis not installed
            continue
        if issubclass(cls, known):
            return kind
    return ATOMIC


#: The class that locks on each kind of cache, by dotted path (imported when picked,
#: as Django imports a cache's ``BACKEND``): the Redis lock protocol on a cache with a
#: raw Redis client, ``add`` on any other.
ON_REDIS = "occupy.backends.cache.redis_cache.RedisCacheBackend"
ON_ADD = "occupy.backends.cache.add.AddCacheBackend"


def redis_client(cache: Any) -> Any | None:
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


class CacheBackend(BaseBackend):
    """Locks stored in a Django cache: by the Redis lock protocol on a Redis cache, by
    ``add`` and a safety margin on any other (see the module docstring).

    ``CacheBackend(alias, params)`` builds the class for the cache configured: one of
    :data:`ON_REDIS` and :data:`ON_ADD`, both subclasses of this one.
    """

    store_errors = _store_errors()
    #: What telemetry calls the store (the class built is one of two, see ``__new__``).
    store_kind = "cache"
    options_schema = {
        "CACHE": Option(str, "default", "the cache alias"),
        "SINGLE_PROCESS": Option(bool, False, "the deployment is one process (LocMemCache)"),
        "POLL_INTERVAL": Option(
            float, 0.05, "longest pause between two looks while waiting", positive=True
        ),
        "SAFETY_MARGIN": Option(
            float,
            0.1,
            "non-Redis caches: how much life an entry read must have left for a write after it",
            positive=True,
        ),
        **REPLICA_OPTIONS,
    }

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.E004`` (the cache is not configured), ``occupy.E005`` (it cannot
        lock across processes) and ``occupy.W002`` (its ``add`` is a read then a write)."""
        options = params.get("OPTIONS") or {}
        cache = options.get("CACHE", "default")
        messages = super().check(alias, params) + missing_cache(alias, cache)
        messages += client_warnings(alias, "CacheBackend", cache, options)
        if not isinstance(cache, str) or cache not in caches.settings:
            return messages
        path = caches.settings[cache].get("BACKEND", "")
        try:
            kind = cache_safety(path)
        except ImportError:
            return messages  # Django's own cache checks report an unimportable cache
        cache_class = import_string(path)
        if kind == NO_STORE or (kind == ONE_PROCESS and not options.get("SINGLE_PROCESS")):
            hint = (
                "Put the locks on a shared cache (Redis, memcached), or use "
                "occupy.backends.db.DatabaseBackend."
            )
            if kind == ONE_PROCESS:
                hint += (
                    " If this deployment really is one process, set "
                    "OPTIONS['SINGLE_PROCESS'] = True."
                )
            messages.append(
                Error(
                    _refusal(alias, cache, cache_class, kind),
                    hint=hint,
                    obj=where(alias),
                    id="occupy.E005",
                )
            )
        elif kind == RACY_ADD:
            messages.append(
                Warning(
                    f"occupy backend {alias!r} uses cache {cache!r} ({path}), whose add() is a "
                    "read then a write: two processes can both take a free key.",
                    hint="Put the locks on a Redis or memcached cache, or use "
                    "occupy.backends.db.DatabaseBackend or occupy.backends.file.FileBackend.",
                    obj=where(alias),
                    id="occupy.W002",
                )
            )
        return messages

    def __new__(cls, alias: str, params: Mapping[str, Any]) -> CacheBackend:
        """Return a new backend of the class for the cache in ``params`` (a subclass of
        ``CacheBackend`` is built as it is)."""
        if cls is CacheBackend:
            cls = import_string(ON_REDIS if _has_redis_client(params) else ON_ADD)
        return super().__new__(cls)

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

    def describe_store(self) -> str:
        """Return the cache the locks are in, and its location."""
        return cache_store(self.cache_alias)

    def store_fix(self) -> str:
        """Return what to check when the cache cannot be used."""
        return (
            f"check that the cache's server answers and that settings.CACHES"
            f"[{self.cache_alias!r}] points at it"
        )


def _has_redis_client(params: Mapping[str, Any]) -> bool:
    """Return whether the cache that ``params`` names has a raw Redis client to run the
    Redis lock protocol on (a cache that is not configured has none: building the
    backend then says what is wrong)."""
    options = params.get("OPTIONS") if isinstance(params, Mapping) else None
    alias = options.get("CACHE", "default") if isinstance(options, Mapping) else "default"
    if not isinstance(alias, str) or alias not in caches.settings:
        return False
    try:
        return redis_client(caches[alias]) is not None
    except InvalidCacheBackendError:
        return False


def _refusal(alias: str, cache_alias: str, cache_class: type, kind: str) -> str:
    """Return why a cache cannot hold ``alias``'s locks, and the fix."""
    name = f"{cache_class.__module__}.{cache_class.__qualname__}"
    if kind == NO_STORE:
        return (
            f"occupy backend {alias!r} uses cache {cache_alias!r} ({name}), which stores "
            "nothing, so it cannot lock even within one process. Use a Redis or "
            "memcached cache, or occupy's DatabaseBackend."
        )
    return (
        f"occupy backend {alias!r} uses cache {cache_alias!r} ({name}), which lives in "
        "one process's memory, so other processes cannot see its locks. Use a shared "
        "cache (Redis, memcached), or set OPTIONS['SINGLE_PROCESS'] = True if this "
        "deployment really is one process."
    )
