"""A store that cannot be reached or used raises ``StoreUnavailable`` on every backend.

It names the backend alias and the key, is chained from the driver's error, and is an
``OccupyError``, so ``except occupy.OccupyError`` catches it (before, the database
backend let ``OperationalError`` through, the cache backend redis-py's errors and the
file backend ``OSError``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
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


def _assert_unavailable(
    backend: BaseBackend,
    call: Callable[[], object],
    cause: type[BaseException] | tuple[type[BaseException], ...],
    *,
    key: str | None = "down:1",
    call_name: str = "",
) -> occupy.StoreUnavailable:
    with pytest.raises(occupy.OccupyError) as info:
        call()
    error = info.value
    assert isinstance(error, occupy.StoreUnavailable), (call_name, repr(error))
    assert (error.key, error.backend) == (key, backend.alias), call_name
    assert repr(backend.alias) in str(error), call_name
    if key is None:  # a call on no key (sweep, claims) does not speak of one
        assert "None" not in str(error), call_name
    else:
        assert repr(key) in str(error), call_name
    assert isinstance(error.__cause__, cause), (call_name, repr(error.__cause__))
    return error


def _exercise(backend: BaseBackend, cause) -> None:
    _assert_unavailable(
        backend, lambda: backend.acquire("down:1", owner="alice", ttl=30, timeout=0), cause
    )
    _assert_unavailable(
        backend, lambda: backend.acquire("down:1", owner="alice", ttl=30, timeout=0.2), cause
    )
    _assert_unavailable(backend, lambda: backend.holder("down:1"), cause)
    # A lease the store granted before it went away.
    lease = backend.make_lease(
        "down:1",
        owner="alice",
        token="0" * 32,
        fence=1,
        expires_at=datetime.now(timezone.utc) + timedelta(seconds=30),
        ttl=30,
    )
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
    return {
        **settings.CACHES,
        "down": {"BACKEND": backend_path, "LOCATION": f"redis://127.0.0.1:{_closed_port()}/0"},
    }


@pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or "")
def test_redis_backend() -> None:
    from redis.exceptions import RedisError

    from occupy.backends.redis import RedisBackend

    with override_settings(CACHES=_down_caches("django_redis.cache.RedisCache")):
        _exercise_all(RedisBackend("redis-down", {"OPTIONS": {"CACHE": "down"}}), RedisError)


@pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or "")
@pytest.mark.parametrize(
    "cache", ["django_redis.cache.RedisCache", "django.core.cache.backends.redis.RedisCache"]
)
@pytest.mark.parametrize("path", ["redis", "add"])
def test_cache_backend(cache: str, path: str) -> None:
    """On a Redis cache the backend runs the Redis protocol on the cache's raw client
    (redis-py's errors); the ``add`` path goes through the cache's API (django-redis
    wraps redis-py's errors in its own)."""
    from django_redis.exceptions import ConnectionInterrupted
    from redis.exceptions import RedisError

    from tests.support.backends import AddOnlyCacheBackend

    with override_settings(CACHES=_down_caches(cache)):
        if path == "redis":
            _exercise_all(CacheBackend("cache-down", {"OPTIONS": {"CACHE": "down"}}), RedisError)
        else:
            _exercise_all(
                AddOnlyCacheBackend("cache-down", {"OPTIONS": {"CACHE": "down"}}),
                (RedisError, ConnectionInterrupted),
            )


def _every_call(backend: BaseBackend) -> dict[str, tuple[str | None, Callable[[], object]]]:
    """Return each public call of ``backend``, by name, with the key it works on."""
    lease = backend.make_lease(
        "down:1",
        owner="alice",
        token="a-token",
        fence=1,
        ttl=30,
        expires_at=datetime.now(timezone.utc) + timedelta(seconds=30),
    )
    return {
        "acquire": ("down:1", lambda: backend.acquire("down:1", owner="alice", ttl=30, timeout=0)),
        "acquire, waiting": (
            "down:1",
            lambda: backend.acquire("down:1", owner="alice", ttl=30, timeout=0.2),
        ),
        "aacquire": (
            "down:1",
            lambda: asyncio.run(backend.aacquire("down:1", owner="alice", ttl=30, timeout=0.2)),
        ),
        "release": ("down:1", lambda: backend.release(lease)),
        "extend": ("down:1", lambda: backend.extend(lease, 30)),
        "holder": ("down:1", lambda: backend.holder("down:1")),
        "is_held": ("down:1", lambda: backend.is_held(lease)),
        "takeover": ("down:1", lambda: backend.takeover("down:1", "bob", 30)),
        "resume": ("down:1", lambda: backend.resume("down:1", "a-token", 30)),
        "claims": (None, lambda: list(backend.claims())),
        "sweep": (None, lambda: backend.sweep()),
        "sweep, dry run": (None, lambda: backend.sweep(dry_run=True)),
    }


def _exercise_every_call(backend: BaseBackend) -> None:
    for name, (key, call) in _every_call(backend).items():
        error = _assert_unavailable(backend, call, OSError, key=key, call_name=name)
        # One failure, not a second one from clearing up after it (a failed acquire
        # that made nothing has nothing to cancel).
        assert error.__context__ is error.__cause__, (name, repr(error.__context__))


def _unusable_location(how: str, tmp_path: Path) -> str:
    """Return a ``LOCATION`` the file backend cannot use, in the way ``how``."""
    if how == "under a regular file":
        (tmp_path / "file").write_text("not a directory")
        return str(tmp_path / "file" / "locks")
    if how == "a regular file":
        (tmp_path / "file").write_text("not a directory")
        return str(tmp_path / "file")
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o555)
    if not os.access(read_only, os.W_OK):
        return str(read_only / "locks")
    # Root writes whatever the mode says; procfs refuses a new entry even to root.
    if not os.path.isdir("/proc/self"):
        pytest.skip("no directory here that this process cannot write")
    return "/proc/occupy-locks"


@pytest.mark.parametrize("how", ["under a regular file", "a regular file", "not writable"])
def test_file_backend(how: str, tmp_path: Path) -> None:
    backend = FileBackend("files-down", {"LOCATION": _unusable_location(how, tmp_path)})
    try:
        _exercise_every_call(backend)
    finally:
        backend.close()


def test_file_backend_whose_location_is_replaced_by_a_file(tmp_path: Path) -> None:
    """A backend that has used its LOCATION (its lock files are open) when the directory
    goes and a regular file takes its place."""
    location = tmp_path / "locks"
    backend = FileBackend("files-down", {"LOCATION": str(location)})
    try:
        backend.release(backend.acquire("down:1", owner="alice", ttl=30, timeout=0))
        shutil.rmtree(location)
        location.write_text("not a directory")
        _exercise_every_call(backend)
    finally:
        backend.close()
