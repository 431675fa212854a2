"""The cache backend: locks on a Django cache, by occupy's Redis lock protocol on a
Redis cache and by ``add`` elsewhere (see :mod:`.backend`; the ``add`` path is
:mod:`.store`)."""

from occupy.backends.cache.backend import (
    ATOMIC,
    NO_STORE,
    ONE_PROCESS,
    RACY_ADD,
    REDIS,
    CacheBackend,
    cache_safety,
)
from occupy.backends.cache.store import AddProtocol, CacheStore

__all__ = [
    "ATOMIC",
    "NO_STORE",
    "ONE_PROCESS",
    "RACY_ADD",
    "REDIS",
    "AddProtocol",
    "CacheBackend",
    "CacheStore",
    "cache_safety",
]
