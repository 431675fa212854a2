"""The Redis backend's replica options on servers of the test's own (a primary, and a
replica it starts and stops): ``MIN_REPLICAS`` refuses to grant on a primary without
live replicas, ``REPLICAS`` gives back a grant no replica acknowledged; the checks
for Sentinel and Cluster caches (``occupy.W020``, ``occupy.W021``); and an acquire's
own error raised, with its clean-up's beneath."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

import occupy
from bench.failover.deployment import deployment_missing, start_redis, stop_process
from tests.support.aliases import server_skip
from tests.support.ports import spare_ports
from tests.support.waiting import wait_for_waiters

pytestmark = pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or "")
needs_servers = pytest.mark.skipif(bool(deployment_missing()), reason=deployment_missing() or "")


def _backend(port: int, **options: Any) -> Any:
    """Return a Redis backend on a django-redis cache of the server at ``port``."""
    from django.conf import settings

    from occupy.backends.redis import RedisBackend

    caches = {
        **settings.CACHES,
        "replicated": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{port}/0",
            "OPTIONS": {"SOCKET_TIMEOUT": 5, "SOCKET_CONNECT_TIMEOUT": 2},
        },
    }
    with override_settings(CACHES=caches):
        backend = RedisBackend("replicated", {"OPTIONS": {"CACHE": "replicated", **options}})
        backend.client  # noqa: B018 - connects while the cache is configured
    return backend


def _wait_replicas(port: int, count: int) -> None:
    import redis

    client = redis.Redis(port=port)
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            info = client.info("replication")
            online = [
                v for k, v in info.items() if k.startswith("slave") and v["state"] == "online"
            ]
            if len(online) >= count:
                return
            time.sleep(0.05)
    finally:
        client.close()
    raise AssertionError(f"{port} has fewer than {count} replicas online")


@contextmanager
def _primary_and_replica(directory: Path) -> Iterator[tuple[int, Any]]:
    """Yield a primary's port and its replica's process (started, online)."""
    primary_port, replica_port = spare_ports(2)
    primary = start_redis(primary_port, directory)
    try:
        replica = start_redis(
            replica_port, directory, "--replicaof", "127.0.0.1", str(primary_port)
        )
        try:
            _wait_replicas(primary_port, 1)
            yield primary_port, replica
        finally:
            stop_process(replica)
    finally:
        stop_process(primary)


@needs_servers
def test_min_replicas_grants_only_on_a_primary_with_a_live_replica(tmp_path: Path) -> None:
    with _primary_and_replica(tmp_path) as (port, replica):
        backend = _backend(port, MIN_REPLICAS=1)
        occupy.release(backend.acquire("book:1", owner="alice", ttl=30, timeout=0))
        import redis

        server = redis.Redis(port=port)
        before = {k: server.get(k) for k in server.keys("*")}  # the fence counter
        stop_process(replica)  # the primary of a failover that promoted its replica
        time.sleep(0.2)  # the primary sees the link close
        with pytest.raises(occupy.StoreUnavailable, match="MIN_REPLICAS") as info:
            backend.acquire("book:1", owner="alice", ttl=30, timeout=0)
        assert info.value.key == "book:1"
        assert "a failover may have replaced it" in str(info.value)
        backend.client.connection_pool.disconnect()
        # Refused before any write: no claim, no queue, the fence counter as it was.
        assert {k: server.get(k) for k in server.keys("*")} == before
        server.close()


@needs_servers
def test_min_replicas_refuses_a_paused_replica_past_the_lag(tmp_path: Path) -> None:
    """A replica that stopped acknowledging (paused, cut off) is not live after a second
    or two: the primary refuses, though its link is still open."""
    with _primary_and_replica(tmp_path) as (port, replica):
        backend = _backend(port, MIN_REPLICAS=1)
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 10
            with pytest.raises(occupy.StoreUnavailable, match="MIN_REPLICAS"):
                while time.monotonic() < deadline:
                    occupy.release(backend.acquire("book:1", owner="a", ttl=30, timeout=0))
                    time.sleep(0.1)
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        backend.client.connection_pool.disconnect()


@needs_servers
def test_replicas_gives_back_a_grant_no_replica_acknowledged(tmp_path: Path) -> None:
    with _primary_and_replica(tmp_path) as (port, replica):
        backend = _backend(port, REPLICAS=1)
        lease = backend.acquire("book:1", owner="alice", ttl=30, timeout=1)
        assert backend.holder("book:1") is not None
        occupy.release(lease)
        os.kill(replica.pid, signal.SIGSTOP)  # it acknowledges nothing now
        try:
            with pytest.raises(occupy.StoreUnavailable, match="REPLICAS") as info:
                backend.acquire("book:1", owner="alice", ttl=30, timeout=0.5)
            assert info.value.key == "book:1"
            assert backend.holder("book:1") is None  # given back
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        backend.client.connection_pool.disconnect()


@needs_servers
def test_replicas_confirms_a_key_handed_over_by_a_release(tmp_path: Path) -> None:
    """A waiter handed the key by a release has it only once the replica has the
    handover: the waiter's own WAIT follows a write of its own."""
    import threading

    with _primary_and_replica(tmp_path) as (port, _replica):
        backend = _backend(port, REPLICAS=1)
        first = backend.acquire("book:1", owner="alice", ttl=30, timeout=1)
        got: list[Any] = []
        waiter = threading.Thread(
            target=lambda: got.append(backend.acquire("book:1", owner="bob", ttl=30, timeout=10))
        )
        waiter.start()
        wait_for_waiters(backend, "book:1")  # bob queues behind alice
        occupy.release(first)
        waiter.join(timeout=15)
        assert got and got[0].owner == "bob" and got[0].fence > first.fence
        holder = backend.holder("book:1")
        assert holder is not None and holder.owner == "bob"
        occupy.release(got[0])
        backend.client.connection_pool.disconnect()


@needs_servers
@pytest.mark.parametrize("min_replicas", [0, 1])
def test_replicas_answers_at_once_on_a_primary_without_replicas(
    tmp_path: Path, min_replicas: int
) -> None:
    """Before, ``acquire(timeout=0)`` with REPLICAS on a Redis without replicas took 1 to
    2 s (a grant, a WAIT of a second, its give-back), and with MIN_REPLICAS too the
    script's own refusal still waited out the whole WAIT (2 s for ``timeout=2``)."""
    import redis

    port = spare_ports(1)[0]
    server = start_redis(port, tmp_path)
    try:
        backend = _backend(port, REPLICAS=1, MIN_REPLICAS=min_replicas)
        for timeout in (0, 2):
            started = time.monotonic()
            with pytest.raises(occupy.StoreUnavailable, match="REPLICAS") as info:
                backend.acquire("book:1", owner="alice", ttl=30, timeout=timeout)
            assert time.monotonic() - started < 0.5, timeout
            assert info.value.key == "book:1"
        client = redis.Redis(port=port)
        assert client.keys("*") == []  # refused before anything was written
        client.close()
        backend.close()
    finally:
        stop_process(server)


@needs_servers
def test_replicas_refuses_a_held_key_at_once(tmp_path: Path) -> None:
    """A refusal (the key is held) does not wait for replicas: nothing was written. Before,
    a refusal's pipelined WAIT waited out the whole bound when the replica had stopped
    acknowledging."""
    with _primary_and_replica(tmp_path) as (port, replica):
        backend = _backend(port, REPLICAS=1)
        lease = backend.acquire("book:1", owner="alice", ttl=30, timeout=1)
        os.kill(replica.pid, signal.SIGSTOP)  # it acknowledges nothing now
        try:
            started = time.monotonic()
            with pytest.raises(occupy.Occupied):
                backend.acquire("book:1", owner="bob", ttl=30, timeout=0)
            assert time.monotonic() - started < 0.5
        finally:
            os.kill(replica.pid, signal.SIGCONT)
        occupy.release(lease)
        backend.client.connection_pool.disconnect()


def test_an_acquire_raises_its_own_error_with_the_clean_up_beneath(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store went away: the try fails, and so does the clean-up after it. The caller
    sees the try's error, caused by the try's driver error; the clean-up's is beneath."""
    from occupy.backends.redis.attempt import RedisAttempt

    port = spare_ports(1)[0]  # nobody listens there
    backend = _backend(port)

    def failing_cancel(self: RedisAttempt) -> None:
        raise self.backend.unavailable(self.key, RuntimeError("the clean-up failed too"))

    monkeypatch.setattr(RedisAttempt, "cancel", failing_cancel)
    with pytest.raises(occupy.StoreUnavailable) as info:
        backend.acquire("book:1", owner="alice", ttl=30, timeout=0)
    raised = info.value
    assert "the clean-up failed too" not in str(raised)
    import redis

    assert isinstance(raised.__cause__, redis.ConnectionError)
    chain, seen = [], raised
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    assert any("the clean-up failed too" in str(e) for e in chain), chain

    async def take() -> None:
        await backend.aacquire("book:1", owner="alice", ttl=30, timeout=0)

    with pytest.raises(occupy.StoreUnavailable) as info:
        asyncio.run(take())
    assert "the clean-up failed too" not in str(info.value)
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    backend.close()


SENTINEL_CACHE = {
    "BACKEND": "django_redis.cache.RedisCache",
    "LOCATION": "redis://mymaster/0",
    "OPTIONS": {
        "CLIENT_CLASS": "django_redis.client.SentinelClient",
        "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
        "SENTINELS": [("127.0.0.1", 26379)],
    },
}


@pytest.mark.parametrize(
    ("backend", "options", "cache_options", "expected"),
    [
        ("occupy.backends.redis.RedisBackend", {}, {}, {"occupy.W020", "occupy.W021"}),
        ("occupy.backends.redis.RedisBackend", {"MIN_REPLICAS": 1}, {}, {"occupy.W020"}),
        (
            "occupy.backends.redis.RedisBackend",
            {"MIN_REPLICAS": 1},
            {"SOCKET_TIMEOUT": 5},
            set(),
        ),
        ("occupy.backends.cache.CacheBackend", {}, {"SOCKET_TIMEOUT": 5}, {"occupy.W021"}),
    ],
)
def test_checks_warn_about_unbounded_calls_and_replaced_primaries_on_sentinel(
    backend: str, options: dict[str, Any], cache_options: dict[str, Any], expected: set[str]
) -> None:
    from django.conf import settings
    from django.utils.module_loading import import_string

    cache = {**SENTINEL_CACHE, "OPTIONS": {**SENTINEL_CACHE["OPTIONS"], **cache_options}}
    params = {"BACKEND": backend, "OPTIONS": {"CACHE": "sentinel", **options}}
    with override_settings(CACHES={**settings.CACHES, "sentinel": cache}):
        found = import_string(backend).check("locks", params)
    ids = {m.id for m in found if m.id in ("occupy.W020", "occupy.W021")}
    assert ids == expected, [str(m) for m in found]


def test_checks_leave_a_plain_redis_cache_alone() -> None:
    from django.conf import settings

    from occupy.backends.redis import RedisBackend

    alias = next(a for a, c in settings.CACHES.items() if "django_redis" in c["BACKEND"])
    found = RedisBackend.check("locks", {"OPTIONS": {"CACHE": alias}})
    assert not [m for m in found if m.id in ("occupy.W020", "occupy.W021")]


@pytest.mark.parametrize("value", [-1, 1.5, "1", True])
def test_replica_options_refuse_what_is_not_a_count(value: Any) -> None:
    from occupy.backends.redis import RedisBackend

    for name in ("REPLICAS", "MIN_REPLICAS"):
        with pytest.raises(occupy.InvalidBackendError, match=name):
            RedisBackend("locks", {"OPTIONS": {"CACHE": "redis", name: value}})
