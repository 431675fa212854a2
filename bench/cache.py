"""Cache backend against seed 003's ``CacheLock``, on the same django-redis cache.

The peer is the seed's lock as written: ``cache.add(key, uuid4(), expires)`` to take it,
``get`` then ``delete`` to release it (three round trips, and the release race the
backend fixes). occupy's ``CacheBackend`` takes and releases through the public API,
one Lua script each way (the Redis backend's, on the cache's client). Run:
``python -m bench cache``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.common import alternate, occupy_cycle, print_table, setup_django


class LockTimeout(Exception):
    """The seed's own error."""


class CacheLock:
    """Seed 003's ``CacheLock``, faithfully (only the cache is passed in)."""

    def __init__(self, cache: Any, expires: int = 60, wait_timeout: int = 0) -> None:
        self.cache = cache
        self.expires = expires  # 函数执行超时时间
        self.wait_timeout = wait_timeout  # 拿锁等待超时时间

    def get_lock(self, lock_key: str) -> uuid.UUID:
        wait_timeout = self.wait_timeout
        identifier = uuid.uuid4()
        while wait_timeout >= 0:
            if self.cache.add(lock_key, identifier, self.expires):
                return identifier
            wait_timeout -= 1
            time.sleep(1)
        raise LockTimeout({"msg": "当前有其他用户正在编辑该采集配置,请稍后重试"})

    def release_lock(self, lock_key: str, identifier: uuid.UUID) -> None:
        lock_value = self.cache.get(lock_key)
        if lock_value == identifier:
            self.cache.delete(lock_key)


def seed_cycle(cache: Any) -> Callable[[int], None]:
    """Return ``fn(n)``: take and release the seed's lock ``n`` times."""
    lock = CacheLock(cache)

    def run(n: int) -> None:
        for _ in range(n):
            identifier = lock.get_lock("bench:cache:seed")
            lock.release_lock("bench:cache:seed", identifier)

    return run


def main() -> None:
    """Print acquire+release rates of occupy's CacheBackend and seed 003's lock."""
    setup_django("sqlite")
    from django.conf import settings
    from django.core.cache import caches

    from occupy.backends import get_backend

    if "locks" not in settings.CACHES:
        print(f"\n## cache backend: skipped ({settings.SKIPS.get('redis')})")
        return
    candidates = {
        "seed 003 CacheLock (add, get+delete)": seed_cycle(caches["locks"]),
        "occupy CacheBackend, django-redis": occupy_cycle("bench:cache", "cache"),
        "occupy CacheBackend, Django RedisCache": occupy_cycle("bench:cache", "cache-django"),
    }
    try:
        results = alternate(candidates, ops=1500, rounds=11)
    finally:
        for alias in ("cache", "cache-django"):  # the fence counters outlive the locks
            link = get_backend(alias).link
            link.client.delete(*link.keys("bench:cache"))
    print_table(
        "Uncontended acquire + release on a Redis cache (one process)",
        results,
        reference="seed 003 CacheLock (add, get+delete)",
        target="occupy ≥ 1.0× the seed's lock on the same django-redis cache",
    )


if __name__ == "__main__":
    main()
