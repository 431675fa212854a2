"""The cache backend: locks on a Django cache, by occupy's Redis lock protocol on a
Redis cache (:mod:`.redis_cache`) and by ``add`` elsewhere (:mod:`.add`, on
:mod:`.store`); building :class:`CacheBackend` picks one (see :mod:`.backend`)."""

from occupy.backends.cache.add import AddCacheBackend
from occupy.backends.cache.backend import (
    ATOMIC,
    NO_STORE,
    ONE_PROCESS,
    RACY_ADD,
    REDIS,
    CacheBackend,
    cache_safety,
)
from occupy.backends.cache.store import CacheStore

__all__ = [
    "ATOMIC",
    "NO_STORE",
    "ONE_PROCESS",
    "RACY_ADD",
    "REDIS",
    "AddCacheBackend",
    "CacheBackend",
    "CacheStore",
    "cache_safety",
]
