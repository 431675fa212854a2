"""``RedisBackend``: locks in Redis, through the raw client of a django-redis cache.

Every operation is the Redis lock protocol (:class:`.protocol.RedisLockBackend`, whose
module docstring states its guarantees) on the client ``get_redis_connection(CACHE)``
gives: one Lua script per call to one Redis primary, fences floored by the server's
``TIME``, first-come-first-served waiting with wake-ups by ``BLPOP``, re-entry by
token, takeover, resume, and ``list_locks``. The same protocol serves
:class:`~occupy.backends.cache.CacheBackend` on a Redis cache; this backend adds its
own ``PREFIX`` and the tuning of waiting and fences.

A claim and its expiry are written by one script, so no crash leaves a lock that never
expires; only the token's holder may release or extend, and a lost lease is fenced out
by its fence.

OPTIONS: ``CACHE`` (the django-redis cache alias, default ``"default"``), ``PREFIX``
(of every Redis key, default ``"occupy:"``), ``POLL_INTERVAL`` (longest block before a
waiter looks again and refreshes its place, default 0.25 s), ``QUEUE_TTL`` (how long a
waiter's place outlives its last look, default 3 s), ``FENCE_TTL`` (how long a key's
fence counter lives from its first grant, default one day; every fence is at least the
server's clock in µs, so a new counter starts above every fence before it),
``MIN_REPLICAS`` and ``REPLICAS`` (the guards against a failover, default 0: see
:mod:`.replication`). Needs Redis 6.2 or later.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from django.core.checks import CheckMessage, Error

from occupy.backends.options import Option, cache_store, missing_cache, where
from occupy.backends.replicas import REPLICA_OPTIONS, client_warnings
from occupy.exceptions import InvalidBackendError

_NO_DJANGO_REDIS = (
    "occupy.backends.redis.RedisBackend needs django-redis: pip install 'django-occupy[redis]'."
)

try:
    from occupy.backends.redis.link import FENCE_TTL, QUEUE_TTL, RedisLink
    from occupy.backends.redis.protocol import RedisLockBackend
    from occupy.backends.redis.replication import Replication
except ImportError as e:  # pragma: no cover - depends on the installation
    raise InvalidBackendError(_NO_DJANGO_REDIS) from e

__all__ = ["RedisBackend"]


def _prefix_problem(prefix: str) -> str | None:
    if "{" in prefix or "}" in prefix:
        return "must have no braces (they would pick the Redis Cluster slot)"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class RedisBackend(RedisLockBackend):
    """Locks in Redis, by the Redis lock protocol; see the module docstring."""

    options_schema = {
        "CACHE": Option(
            str,
            "default",
            "the django-redis cache alias",
            check=lambda v: None if v else "must name a cache alias",
        ),
        "PREFIX": Option(
            str, "occupy:", "what every key occupy writes starts with", check=_prefix_problem
        ),
        "POLL_INTERVAL": Option(
            float, 0.25, "longest pause between two looks while waiting", positive=True
        ),
        "QUEUE_TTL": Option(
            float, QUEUE_TTL, "how long a waiter's place outlives its last look", positive=True
        ),
        "FENCE_TTL": Option(
            float, FENCE_TTL, "how long a key's fence is remembered", positive=True
        ),
        **REPLICA_OPTIONS,
    }

    @classmethod
    def config_problems(
        cls, alias: str, params: Mapping[str, Any], options: Mapping[str, Any]
    ) -> list[str]:
        """Add: ``QUEUE_TTL`` must be at least twice ``POLL_INTERVAL``."""
        problems = super().config_problems(alias, params, options)
        queue_ttl, poll = options["QUEUE_TTL"], options["POLL_INTERVAL"]
        if _number(queue_ttl) and _number(poll) and queue_ttl < 2 * poll:
            problems.append(
                f"{where(alias, 'QUEUE_TTL')} ({queue_ttl:g} s) must be at least twice "
                f"POLL_INTERVAL ({poll:g} s), or live waiters lose their place."
            )
        return problems

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.E004`` (``OPTIONS["CACHE"]`` is not in ``settings.CACHES``) and
        ``occupy.E008`` (that cache is not a django-redis one)."""
        cache = (params.get("OPTIONS") or {}).get("CACHE", "default")
        return [
            *super().check(alias, params),
            *missing_cache(alias, cache),
            *_not_django_redis(alias, cache),
            *client_warnings(alias, "RedisBackend", cache, params.get("OPTIONS") or {}),
        ]

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        if importlib.util.find_spec("django_redis") is None:  # pragma: no cover
            raise InvalidBackendError(_NO_DJANGO_REDIS)
        super().__init__(alias, params)
        self.cache_alias: str = self.options["CACHE"]
        self.prefix: str = self.options["PREFIX"]
        self.poll_interval = float(self.options["POLL_INTERVAL"])
        self.queue_ttl = float(self.options["QUEUE_TTL"])
        self.fence_ttl = float(self.options["FENCE_TTL"])
        self.replication = Replication(self.options["MIN_REPLICAS"], self.options["REPLICAS"])

    # --- connection ------------------------------------------------------------------
    def make_link(self) -> RedisLink:
        """Return the protocol's link on the django-redis cache's raw client."""
        return self._link_on(self._connect())

    def _connect(self) -> Any:
        from django.core.cache import InvalidCacheBackendError
        from django_redis import get_redis_connection

        try:
            return get_redis_connection(self.cache_alias, write=True)
        except InvalidCacheBackendError as e:
            raise InvalidBackendError(
                f"occupy backend {self.alias!r} uses cache {self.cache_alias!r}, which is not "
                f"in settings.CACHES: {e}"
            ) from e
        except NotImplementedError as e:
            raise InvalidBackendError(
                f"occupy backend {self.alias!r} needs a django-redis cache with one primary "
                f"(django_redis.cache.RedisCache, default or Sentinel client); cache "
                f"{self.cache_alias!r} gives no raw Redis client: point OPTIONS['CACHE'] at "
                "such a cache."
            ) from e

    def bind(self, client: Any) -> None:
        """Run the protocol on the raw redis-py ``client`` (normally the cache's; tests
        bind others)."""
        self.use_link(self._link_on(client))

    def _link_on(self, client: Any) -> RedisLink:
        return RedisLink(
            client,
            prefix=self.prefix,
            poll_interval=self.poll_interval,
            queue_ttl=self.queue_ttl,
            fence_ttl=self.fence_ttl,
            replication=self.replication,
        )

    def describe_store(self) -> str:
        """Return the Redis server of the cache the locks are on."""
        return cache_store(self.cache_alias)

    def store_fix(self) -> str:
        """Return what to check when Redis cannot be used."""
        return (
            f"check that this Redis server answers and that settings.CACHES"
            f"[{self.cache_alias!r}] points at it"
        )


def _not_django_redis(alias: str, cache: Any) -> list[CheckMessage]:
    """Return ``occupy.E008`` if cache ``cache`` is configured with a class that is not
    django-redis's ``RedisCache`` (a class that cannot be imported is Django's to report)."""
    from django.core.cache import caches
    from django.utils.module_loading import import_string

    path = caches.settings.get(cache, {}).get("BACKEND") if isinstance(cache, str) else None
    if not isinstance(path, str):
        return []
    try:
        cache_class = import_string(path)
        from django_redis.cache import RedisCache
    except ImportError:
        return []
    if isinstance(cache_class, type) and issubclass(cache_class, RedisCache):
        return []
    return [
        Error(
            f"occupy backend {alias!r} (RedisBackend) uses cache {cache!r}, whose BACKEND "
            f"{path} is no django-redis cache: it gives no Redis client to lock on.",
            hint="Point OPTIONS['CACHE'] at a cache whose BACKEND is "
            "django_redis.cache.RedisCache, or use occupy.backends.cache.CacheBackend on "
            "this cache.",
            obj=where(alias),
            id="occupy.E008",
        )
    ]
