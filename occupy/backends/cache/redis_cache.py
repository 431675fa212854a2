"""``RedisCacheBackend``: the cache backend on a Redis cache, by occupy's one Redis lock
protocol (:class:`~occupy.backends.redis.protocol.RedisLockBackend`, whose module
docstring states its guarantees) on the cache's raw client.

Its Redis keys are ``make_key("occupy:")`` followed by ``{<SHA-256 of the key>}:lock``
(and ``:fence``, ``:queue``, ``:waiters``, ``:wake:<token>``), so the cache's
``KEY_PREFIX`` and ``VERSION`` apply and each lock's keys share one Redis Cluster slot.
"""

from __future__ import annotations

from django.core.cache import caches

from occupy.backends.cache.backend import CacheBackend, redis_client
from occupy.backends.cache.store import PREFIX
from occupy.backends.redis.link import QUEUE_TTL, RedisLink
from occupy.backends.redis.protocol import RedisLockBackend
from occupy.backends.redis.replication import Replication
from occupy.exceptions import InvalidBackendError

__all__ = ["RedisCacheBackend"]


class RedisCacheBackend(CacheBackend, RedisLockBackend):
    """Locks on a Redis cache (django-redis with one primary, or Django's own
    ``RedisCache``) by the Redis lock protocol; ``CacheBackend`` builds it for such a
    cache. ``SAFETY_MARGIN`` is ignored: nothing is read then written."""

    def make_link(self) -> RedisLink:
        """Return the protocol's link on the cache's raw client.

        The names are :class:`~occupy.backends.cache.store.CacheStore`'s (the full
        digest, through the cache's ``make_key``): a value found under them that the
        scripts did not write (a pickled entry, a hash of an older layout during a
        rolling deploy) is held by an unknown holder until it expires, never free, and
        a fence counter found there is carried on.
        """
        cache = caches[self.cache_alias]
        client = redis_client(cache)
        if client is None:
            raise InvalidBackendError(
                f"occupy backend {self.alias!r}: cache {self.cache_alias!r} has no raw Redis "
                "client any more (its settings changed after the backend was built)."
            )
        return RedisLink(
            client,
            prefix=str(cache.make_key(PREFIX)),
            poll_interval=self.poll_interval,
            queue_ttl=max(QUEUE_TTL, 2 * self.poll_interval),
            digest_chars=64,
            replication=Replication(self.options["MIN_REPLICAS"], self.options["REPLICAS"]),
        )
