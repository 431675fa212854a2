"""A store that cannot be reached or used raises ``StoreUnavailable`` on every backend.

It names the backend alias and the key, is chained from the driver's error, and is an
``OccupyError``, so ``except occupy.OccupyError`` catches it (before, the database
backend let ``OperationalError`` through, the cache backend redis-py's errors and the
file backend ``OSError``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.conf import settings
from django.db import DatabaseError, connections
from django.test import override_settings

import occupy
from occupy.backends.base import BaseBackend
from occupy.backends.cache import CacheBackend
from occupy.backends.db import DatabaseBackend
from occupy.backends.file import FileBackend
from tests.support.aliases import server_skip


def _closed_port() -> int:
    """Return a local port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _assert_unavailable(backend: BaseBackend, call: Callable[[], object],
                        cause: type[BaseException] | tuple[type[BaseException], ...]) -> None:
    with pytest.raises(occupy.OccupyError) as info:
        call()
    error = info.value
    assert isinstance(error, occupy.StoreUnavailable), repr(error)
    assert (error.key, error.using) == ("down:1", backend.alias)
    assert "'down:1'" in str(error) and repr(backend.alias) in str(error)
    assert isinstance(error.__cause__, cause), repr(error.__cause__)


def _exercise(backend: BaseBackend, cause) -> None:
    _assert_unavailable(
        backend, lambda: backend.acquire("down:1", owner="alice", ttl=30, timeout=0), cause)
    _assert_unavailable(
        backend, lambda: backend.acquire("down:1", owner="alice", ttl=30, timeout=0.2), cause)
    _assert_unavailable(backend, lambda: backend.holder("down:1"), cause)
    # A lease the store granted before it went away.
    lease = backend.make_lease("down:1", owner="alice", token="0" * 32, fence=1,
                               expires_at=datetime.now(timezone.utc) + timedelta(seconds=30),
                               ttl=30)
    _assert_unavailable(backend, lambda: backend.release(lease), cause)
    _assert_unavailable(backend, lambda: backend.extend(lease, 30), cause)
    _assert_unavailable(backend, lambda: backend.is_held(lease), cause)


def _exercise_all(backend: BaseBackend, cause) -> None:
    """:func:`_exercise`, then re-entry by token and takeover."""
    _exercise(backend, cause)
    _assert_unavailable(backend, lambda: backend.resume("down:1", "0" * 32, 30), cause)
    _assert_unavailable(backend, lambda: backend.takeover("down:1", "bob", 30), cause)


@pytest.fixture
def down_database(live_db: None) -> Iterator[Callable[[str, dict], str]]:
    """Add a database alias like an existing one but pointing at nothing."""
    added = []

    def add(like: str, changes: dict) -> str:
        alias = f"down-{like}"
        connections.settings[alias] = {**connections.settings[like], **changes}
        added.append(alias)
        return alias

    yield add
    for alias in added:  # before live_db wipes every database
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]


@pytest.mark.parametrize("like", ["sqlite", "postgresql", "mysql"])
def test_database_backend(like: str, down_database, tmp_path: Path) -> None:
    if like != "sqlite" and server_skip(f"db-{like}") and like != settings.DEFAULT_DB:
        pytest.skip(server_skip(f"db-{like}"))
    if like == "sqlite":
        database = down_database("sqlite", {"NAME": str(tmp_path / "missing" / "x.sqlite3")})
    elif like == settings.DEFAULT_DB:
        database = down_database("default", {"PORT": _closed_port()})
    else:
        database = down_database(like, {"PORT": _closed_port()})
    backend = DatabaseBackend("db-down", {"OPTIONS": {"DATABASE": database}})
    _exercise_all(backend, DatabaseError)


def _down_caches(backend_path: str) -> dict:
    return {**settings.CACHES, "down": {"BACKEND": backend_path,
                                       "LOCATION": f"redis://127.0.0.1:{_closed_port()}/0"}}


@pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or "")
def test_redis_backend() -> None:
    from redis.exceptions import RedisError

    from occupy.backends.redis import RedisBackend

    with override_settings(CACHES=_down_caches("django_redis.cache.RedisCache")):
        _exercise_all(RedisBackend("redis-down", {"OPTIONS": {"CACHE": "down"}}), RedisError)


@pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or "")
@pytest.mark.parametrize("cache", ["django_redis.cache.RedisCache",
                                   "django.core.cache.backends.redis.RedisCache"])
@pytest.mark.parametrize("path", ["redis", "add"])
def test_cache_backend(cache: str, path: str) -> None:
    """On a Redis cache the backend runs the Redis protocol on the cache's raw client
    (redis-py's errors); the ``add`` path goes through the cache's API (django-redis
    wraps redis-py's errors in its own)."""
    from django_redis.exceptions import ConnectionInterrupted
    from redis.exceptions import RedisError

    from tests.backends.stores import AddOnlyCacheBackend

    with override_settings(CACHES=_down_caches(cache)):
        if path == "redis":
            _exercise_all(CacheBackend("cache-down", {"OPTIONS": {"CACHE": "down"}}),
                          RedisError)
        else:
            _exercise_all(AddOnlyCacheBackend("cache-down", {"OPTIONS": {"CACHE": "down"}}),
                          (RedisError, ConnectionInterrupted))


def test_file_backend(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    backend = FileBackend("files-down", {"LOCATION": str(tmp_path / "file" / "locks")})
    _exercise(backend, OSError)
    backend.close()
