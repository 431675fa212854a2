"""The Redis backend on Redis servers the tests start themselves, on spare ports: a restart
without persistence, and Redis Cluster (which refuses a script touching two slots)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

import occupy
from occupy.backends.base import STORE_GRACE
from tests.support.aliases import server_skip
from tests.support.ports import spare_port
from tests.support.redis_server import REDIS_SERVER, RedisServer
from tests.support.waiting import wait_for_waiters

pytestmark = [
    pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or ""),
    pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not on PATH"),
]


@contextmanager
def _spare_cache(port: int) -> Iterator[None]:
    """Add the django-redis cache ``spare``, on the server at ``port``, to ``CACHES``."""
    caches = {
        **settings.CACHES,
        "spare": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{port}/0",
        },
    }
    with override_settings(CACHES=caches):
        yield


def _backend(cache: str):
    from occupy.backends.redis import RedisBackend

    return RedisBackend(
        cache, {"OPTIONS": {"CACHE": cache, "PREFIX": f"{settings.REDIS_PREFIX}occupy:"}}
    )


def test_fences_rise_across_a_restart_without_persistence(tmp_path: Path) -> None:
    port = spare_port()
    with _spare_cache(port):
        backend = _backend("spare")
        fences = []
        with RedisServer(port, tmp_path):
            for _ in range(3):
                lease = backend.acquire("book:1", owner="alice", ttl=30, timeout=0)
                fences.append(lease.fence)
                occupy.release(lease)
            assert backend.client.exists(backend.keys("book:1").fence)
        with RedisServer(port, tmp_path):
            backend.client.connection_pool.disconnect()  # the old sockets died with it
            assert backend.client.dbsize() == 0  # the counter is gone: only the clock is left
            lease = backend.acquire("book:1", owner="alice", ttl=30, timeout=0)
            fences.append(lease.fence)
            occupy.release(lease)
        backend.client.connection_pool.disconnect()
    assert fences == sorted(set(fences)), fences


#: How long the private server is stopped: far longer than any bound below.
STALL = 6.0


@pytest.mark.parametrize("warm", [True, False], ids=["connected", "connecting"])
def test_a_stalled_server_does_not_outlast_the_timeout(tmp_path: Path, warm: bool) -> None:
    """With the server stopped, ``acquire(timeout=0.5)`` gives up after about two seconds
    (the try's and the cancel's calls each get the time left, at least a second),
    whether its connection was made before the stall or has to be made during it;
    before, it blocked until the server answered. (A grant the stopped server had
    received runs when it resumes, and holds the key until its ttl.)"""
    port = spare_port()
    with _spare_cache(port):
        backend = _backend("spare")
        with RedisServer(port, tmp_path) as server:
            if warm:
                occupy.release(backend.acquire("book:2", owner="bob", ttl=30, timeout=1))
            assert backend.holder("book:1") is None
            os.kill(server.pid, signal.SIGSTOP)
            timer = threading.Timer(STALL, os.kill, args=[server.pid, signal.SIGCONT])
            timer.start()
            started = time.monotonic()
            try:
                with pytest.raises((occupy.LockTimeout, occupy.StoreUnavailable)) as info:
                    backend.acquire("book:1", owner="alice", ttl=30, timeout=0.5)
                took = time.monotonic() - started
            finally:
                timer.cancel()
                os.kill(server.pid, signal.SIGCONT)
            assert took < 0.5 + 2 * STORE_GRACE + 0.5, f"took {took:.1f} s: {info.value!r}"
            assert info.value.key == "book:1"
        backend.close()
        backend.client.connection_pool.disconnect()


def test_a_grant_that_comes_after_the_timeout_is_given_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where calls cannot be bounded (Redis Cluster, Sentinel), a stalled server blocks
    the call until it answers, but the grant it then makes is given back and reported
    as ``LockTimeout``, never returned to a caller that stopped waiting long ago."""
    from occupy.backends.redis.calls import BoundedCalls

    monkeypatch.setattr(BoundedCalls, "of", classmethod(lambda cls, client: None))
    port = spare_port()
    with _spare_cache(port):
        backend = _backend("spare")
        with RedisServer(port, tmp_path) as server:
            assert backend.holder("book:1") is None  # connected
            os.kill(server.pid, signal.SIGSTOP)
            timer = threading.Timer(2.5, os.kill, args=[server.pid, signal.SIGCONT])
            timer.start()
            try:
                with pytest.raises(occupy.LockTimeout, match="after the timeout"):
                    backend.acquire("book:1", owner="alice", ttl=30, timeout=0.5)
            finally:
                timer.join()
            assert backend.holder("book:1") is None
        backend.client.connection_pool.disconnect()


def test_every_script_stays_in_one_cluster_slot(tmp_path: Path) -> None:
    """Redis Cluster refuses a script whose keys span slots (CROSSSLOT), even with one
    node: take, queue, hand over, cancel, extend and release all pass there."""
    import redis
    from redis.cluster import RedisCluster

    port = spare_port(cluster=True)
    with RedisServer(
        port,
        tmp_path,
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        str(tmp_path / "nodes.conf"),
    ):
        node = redis.Redis(port=port)
        node.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        for _ in range(200):
            if b"cluster_state:ok" in node.execute_command("CLUSTER", "INFO"):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the one-node cluster never reported cluster_state:ok")
        node.close()
        cluster = RedisCluster(host="127.0.0.1", port=port)
        try:
            backend = _backend("cluster")
            backend.bind(cluster)
            for key in ("book:1", "a{b}c", "}{"):
                _exercise(backend, key)
            assert [c.owner for c in backend.claims()] == []
        finally:
            cluster.close()


def _exercise(backend, key: str) -> None:
    alice = backend.acquire(key, owner="alice", ttl=30, timeout=0)
    again = backend.resume(key, alice.token, 30)  # re-entry by token
    assert again.depth == 2
    occupy.release(again)
    with pytest.raises(occupy.LockTimeout):
        backend.acquire(key, owner="carol", ttl=30, timeout=0.2)  # queued, then cancelled
    got = []
    waiter = threading.Thread(
        target=lambda: got.append(backend.acquire(key, owner="bob", ttl=30, timeout=10))
    )
    waiter.start()
    wait_for_waiters(backend, key)
    assert [(c.owner, c.state) for c in backend.claims()] == [
        ("alice", "using"),
        ("bob", "pending"),
    ]
    alice.extend(60)
    occupy.release(alice)  # hands the key to bob, woken through his list
    waiter.join(10)
    assert got and got[0].fence > alice.fence
    occupy.release(got[0])
    assert backend.holder(key) is None


def count_through_restarts(port: int, prefix: str, key: str, stop: Any) -> tuple[list[tuple], int]:
    """Loop over ``key`` on the Redis server at ``port`` until ``stop`` is set (two
    minutes at most), incrementing its Counter row under the lock, going on through
    errors while the server restarts. Return the ``(entered, left, fence)`` spans and
    how many calls failed."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from occupy.backends.redis import RedisBackend
    from tests.testapp.models import Counter

    backend = RedisBackend(
        "restarts", {"OPTIONS": {"PREFIX": prefix, "POLL_INTERVAL": 0.1, "QUEUE_TTL": 1}}
    )
    backend.bind(
        redis.Redis(
            port=port, socket_timeout=2, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
        )
    )
    spans, failures = [], 0
    deadline = time.monotonic() + 120
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            # ttl 3 s: well above a section and a restart on a loaded machine, and an
            # orphan left by a release the restart cut off blocks the others no longer.
            lease = backend.acquire(key, owner=f"worker:{os.getpid()}", ttl=3, timeout=5)
        except occupy.OccupyError:  # the server is down (or still loading): try again
            failures += 1
            time.sleep(0.02)
            continue
        entered = time.monotonic()
        counter = Counter.objects.get(name=key)
        time.sleep(0.25)  # long enough that a restart catches holders inside
        counter.value += 1
        counter.save()
        spans.append((entered, time.monotonic(), lease.fence))
        try:
            occupy.release(lease)
        except occupy.OccupyError:  # its claim expires by its ttl
            failures += 1
    return spans, failures


@pytest.mark.multiprocess
@pytest.mark.slow  # five servers started in turn, workers through three restarts: ~18 s
def test_no_overlap_and_rising_fences_while_the_server_restarts(
    tmp_path: Path, live_db: None
) -> None:
    """Four processes contend for one key while the Redis server they use (with an
    append-only file, so that its locks survive a restart) is restarted three times.
    Without the append-only file the holder inside its section loses its lock to the
    next worker at each restart, and the overlap check fails."""
    from tests.support import multiproc
    from tests.support.exclusion import assert_exclusive
    from tests.testapp.models import Counter

    port = spare_port()
    durable = ("--appendonly", "yes", "--appendfsync", "always")
    Counter.objects.create(name="stock", value=0)
    stop = multiproc._ctx.Event()

    def moved_to(count: int) -> None:  # workers take seconds to start on a loaded machine
        deadline = time.monotonic() + 60
        while Counter.objects.get(name="stock").value < count:
            assert time.monotonic() < deadline, f"the key never moved to {count}"
            time.sleep(0.05)

    with RedisServer(port, tmp_path, *durable):
        workers = multiproc.start(
            count_through_restarts, [(port, settings.REDIS_PREFIX, "stock", stop)] * 4
        )
        moved_to(1)  # the restarts begin with the workers inside the loop
        time.sleep(1)
    for _ in range(3):
        with RedisServer(port, tmp_path, *durable):
            time.sleep(2)
    with RedisServer(port, tmp_path, *durable):
        moved_to(Counter.objects.get(name="stock").value + 4)  # moving again afterwards
        stop.set()
        results = multiproc.collect(workers, timeout=60)
    spans = [worker_spans for worker_spans, _failures in results]
    assert sum(failures for _spans, failures in results) > 0  # the restarts were felt
    # Liveness only (the timing varies): everybody got in, and the key kept moving.
    assert all(spans) and sum(len(s) for s in spans) >= 8, [len(s) for s in spans]
    assert_exclusive(spans, "stock")
