"""The backends' contract on a Redis Cluster of the test's own (three primaries, three
replicas: bench/failover/cluster.py), through a django-redis client whose raw client
is a redis-py ``RedisCluster``; keys spread over the slots of every primary; and a
primary failed over under load."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test import override_settings

import occupy
from bench.failover.cluster import ClusterDeployment, cluster_missing
from bench.failover.run import Options, run_failovers
from tests.backends import test_contract
from tests.support.aliases import server_skip

pytestmark = [
    pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or ""),
    pytest.mark.skipif(bool(cluster_missing()), reason=cluster_missing() or ""),
]

ALIAS = "redis-cluster"

# Every test of the contract suite, bound to the cluster through ``alias`` below.
globals().update(
    {name: test for name, test in vars(test_contract).items() if name.startswith("test_")}
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterDeployment]:
    with (
        tempfile.TemporaryDirectory(prefix="occupy-cluster-") as directory,
        ClusterDeployment(Path(directory)) as deployment,
    ):
        from django.conf import settings

        caches = {
            **settings.CACHES,
            ALIAS: {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": f"redis://127.0.0.1:{deployment.ports[0]}",
                "OPTIONS": {
                    "CLIENT_CLASS": "bench.failover.cluster.ClusterClient",
                    "SOCKET_TIMEOUT": 5,
                },
            },
        }
        occupy_settings = dict(settings.OCCUPY)
        occupy_settings["BACKENDS"] = {
            **settings.OCCUPY["BACKENDS"],
            ALIAS: {
                "BACKEND": "occupy.backends.redis.RedisBackend",
                "OPTIONS": {"CACHE": ALIAS},
            },
        }
        with override_settings(CACHES=caches, OCCUPY=occupy_settings):
            yield deployment
            from occupy.backends import close_connections

            close_connections()


@pytest.fixture
def alias(live_db: None, cluster: ClusterDeployment) -> Iterator[str]:
    """The contract suite's backend: the Redis backend on the cluster."""
    cluster.flush()
    yield ALIAS
    cluster.flush()


def test_the_client_is_a_cluster_client(alias: str) -> None:
    from redis.cluster import RedisCluster

    from occupy.backends import get_backend

    assert isinstance(get_backend(alias).client, RedisCluster)


def test_keys_over_the_slots_of_every_primary(alias: str, cluster: ClusterDeployment) -> None:
    """Two thousand keys land on about two thousand slots of all three primaries; each
    is taken, held, and released there, with its fence."""
    from redis.cluster import RedisCluster

    from occupy.backends import get_backend

    backend = get_backend(alias)
    client: Any = backend.client
    assert isinstance(client, RedisCluster)
    slots, nodes = set(), Counter()
    for i in range(2000):
        key = f"spread:{i}"
        name = backend.keys(key).lock
        slot = client.keyslot(name)
        slots.add(slot)
        nodes[client.get_node_from_key(name).port] += 1
        lease = occupy.acquire(key, owner="o", ttl=30, timeout=0, backend=alias)
        assert client.get(name) is not None  # on the slot's primary
        occupy.release(lease)
        assert occupy.holder(key, backend=alias) is None
    assert len(nodes) == 3, nodes
    assert len(slots) > 1500, len(slots)


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.skipif("postgresql" not in connections, reason="no PostgreSQL (the fenced rows)")
def test_a_primary_failed_over_under_load(tmp_path: Path, live_db: None) -> None:
    """The failover run of test_redis_sentinel.py on a cluster of its own, with
    ``MIN_REPLICAS = 1``: the primary of one key's slot is paused past the node timeout
    until its replica took over, then resumed, while workers take the keys and write
    fenced rows. (``make bench`` also fails primaries over with ``CLUSTER FAILOVER``
    and ``SIGKILL``, and compares the replica options.)"""
    options = Options(
        database=connections["postgresql"].settings_dict["NAME"],
        min_replicas=1,
        kind="cluster",
        failovers=("sigstop",),
    )
    result, failovers = run_failovers(tmp_path, options)
    print(f"\nfailovers {failovers}\n{result.row()}\nerrors {dict(result.errors)}")
    assert result.failovers == 1
    assert result.grants > 50, result.row()
    assert result.stale_accepted == 0, result.row()
    assert result.replaced == 0, result.replaced_examples[:5]
    assert result.not_rising == 0, result.row()
    assert result.foreign == [], result.foreign[:3]


def test_replicas_waits_for_the_replica_of_the_keys_primary(
    alias: str, cluster: ClusterDeployment
) -> None:
    """``REPLICAS = 1`` on a cluster: the WAIT goes to the primary that made the grant
    (with its replica paused, the grant is given back; another node's WAIT would have
    counted its own replica)."""
    import os
    import signal

    from bench.failover.deployment import _command
    from occupy.backends.redis import RedisBackend

    backend = RedisBackend("acked", {"OPTIONS": {"CACHE": ALIAS, "REPLICAS": 1}})
    name = backend.keys("book:1").lock
    primary = backend.client.get_node_from_key(name).port
    occupy.release(backend.acquire("book:1", owner="a", ttl=30, timeout=1))
    me = next(
        line.split()[0]
        for line in _command(primary, "CLUSTER", "NODES").decode().splitlines()
        if "myself" in line
    )
    replica = next(
        int(line.split()[1].split("@")[0].rsplit(":", 1)[1])
        for line in _command(primary, "CLUSTER", "NODES").decode().splitlines()
        if line.split()[3] == me
    )
    pid = cluster.processes[replica].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(occupy.StoreUnavailable, match="REPLICAS"):
            backend.acquire("book:1", owner="a", ttl=30, timeout=0.2)
        assert backend.holder("book:1") is None  # given back
    finally:
        os.kill(pid, signal.SIGCONT)
    occupy.release(backend.acquire("book:1", owner="a", ttl=30, timeout=1))
    backend.close()
