"""Backends the tests configure that are not in occupy itself."""

from __future__ import annotations

from typing import Any

from occupy.backends.cache import AddProtocol, CacheBackend, CacheStore


class AddOnlyCacheBackend(CacheBackend):
    """``CacheBackend`` that ignores the Redis protocol and uses ``add``/``get``/``set``/
    ``delete`` only, as it does on memcached: its cross-process behaviour is tested on
    the shared Redis cache, since no memcached server is at hand."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.protocol.close()
        self._protocol = AddProtocol(
            self, CacheStore(self.cache_alias, self.margin), self.poll_interval
        )
