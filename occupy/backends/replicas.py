"""The replica options of the backends on Redis (``MIN_REPLICAS``, ``REPLICAS``) and
the checks for Sentinel and Cluster clients (``occupy.W020``, ``occupy.W021``), with no
import of redis-py (the cache backend declares them on any cache).

What each option protects is in :mod:`occupy.backends.redis.replication` and the docs
(``howto/redis-deploy.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.checks import CheckMessage, Warning

from occupy.backends.options import Option, where

__all__ = ["REPLICA_OPTIONS", "client_warnings"]


def _count_problem(value: int) -> str | None:
    return "must be 0 or more" if value < 0 else None


#: The two options, for a backend's ``options_schema``.
REPLICA_OPTIONS = {
    "MIN_REPLICAS": Option(
        int,
        0,
        "grant only on a primary with this many live replicas (no grant from a replaced primary)",
        check=_count_problem,
    ),
    "REPLICAS": Option(
        int,
        0,
        "wait for this many replicas to acknowledge each grant (WAIT), within the timeout",
        check=_count_problem,
    ),
}


def _cache_kind(cache: Any) -> str | None:
    """Return ``"Sentinel"`` or ``"Cluster"`` if cache alias ``cache`` is configured with
    such a client or connection factory, else ``None``."""
    from django.core.cache import caches

    config = caches.settings.get(cache, {}) if isinstance(cache, str) else {}
    options = config.get("OPTIONS") or {}
    names = " ".join(
        str(options.get(name, ""))
        for name in ("CLIENT_CLASS", "CONNECTION_FACTORY", "CONNECTION_POOL_CLASS")
    )
    from django.conf import settings

    names += " " + str(getattr(settings, "DJANGO_REDIS_CONNECTION_FACTORY", ""))
    lowered = names.lower()
    if "sentinel" in lowered:
        return "Sentinel"
    if "cluster" in lowered:
        return "Cluster"
    return None


def client_warnings(
    alias: str, backend: str, cache: Any, options: Mapping[str, Any]
) -> list[CheckMessage]:
    """Return ``occupy.W020`` (a Sentinel or Cluster cache without ``SOCKET_TIMEOUT``:
    its calls are not bounded by the caller's timeout, only by the socket's) and
    ``occupy.W021`` (a Sentinel cache with ``MIN_REPLICAS`` 0: a replaced primary can
    still grant) for the occupy backend ``alias`` on cache ``cache``."""
    kind = _cache_kind(cache)
    if kind is None:
        return []
    from django.core.cache import caches

    cache_options = (caches.settings.get(cache, {}) or {}).get("OPTIONS") or {}
    found: list[CheckMessage] = []
    if not cache_options.get("SOCKET_TIMEOUT"):
        found.append(
            Warning(
                f"occupy backend {alias!r} ({backend}) is on cache {cache!r}, a Redis "
                f"{kind} client without SOCKET_TIMEOUT: occupy cannot hold its calls to "
                "the caller's timeout there, so a primary that stops answering blocks "
                "acquire, release, extend and holder for as long as the socket waits "
                "(for ever by default).",
                hint=f"Set settings.CACHES[{cache!r}]['OPTIONS']['SOCKET_TIMEOUT'] (and "
                "SOCKET_CONNECT_TIMEOUT), e.g. 5 seconds.",
                obj=where(alias),
                id="occupy.W020",
            )
        )
    if kind == "Sentinel" and not options.get("MIN_REPLICAS"):
        found.append(
            Warning(
                f"occupy backend {alias!r} ({backend}) is on cache {cache!r}, a Redis "
                "Sentinel client, with MIN_REPLICAS 0: after a failover the old primary "
                "keeps granting keys to processes that kept their connections to it, "
                "until Sentinel demotes it (seconds), while the new one grants them too.",
                hint=f"Set {where(alias, 'MIN_REPLICAS')} to 1 (the primary must have a "
                "live replica to grant), and give what you write the lease's fence.",
                obj=where(alias),
                id="occupy.W021",
            )
        )
    return found
