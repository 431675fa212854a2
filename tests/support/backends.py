"""Backends the tests configure that are not in occupy itself."""

from __future__ import annotations

from occupy.backends.cache import AddCacheBackend


class AddOnlyCacheBackend(AddCacheBackend):
    """``CacheBackend`` that ignores the Redis protocol and uses ``add``/``get``/``set``/
    ``delete`` only, as it does on memcached: its cross-process behaviour is tested on
    the shared Redis cache, since no memcached server is at hand."""
