"""Grants survive etcd failovers: four processes take one key and write fenced rows to
PostgreSQL while the test kills the leader, pauses a member past its election timeout
(``SIGSTOP``) and restarts members of a three-member cluster of its own.

Counted and asserted: overlaps (two holders at once, by the monotonic clock all the
processes share), stale writes accepted (a ledger whose fences do not strictly rise),
grants acknowledged and then lost (a holder's fenced write refused, or its release
finding the grant gone). docs/backends/etcd.md shows the numbers of a run.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connections

from tests.support import multiproc
from tests.support.etcd_cluster import EtcdCluster, etcd_missing
from tests.support.etcd_failover import GUARD, LEDGER, take_and_write
from tests.support.ports import top_ports

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.slow,  # a failover soak: 16 s of faults and a cluster started, about 25 s
    pytest.mark.skipif(etcd_missing() is not None, reason=etcd_missing() or ""),
    pytest.mark.skipif("postgresql" in settings.SKIPS, reason=settings.SKIPS.get("postgresql", "")),
]

WORKERS = 4
#: How long the workers run: a quiet start, then the faults, then a quiet end.
SECONDS = 16.0


@pytest.fixture
def ledger(live_db: None) -> Iterator[None]:
    with connections["postgresql"].cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {GUARD}, {LEDGER}")
        cursor.execute(f"CREATE TABLE {GUARD} (id int PRIMARY KEY, fence bigint NOT NULL)")
        cursor.execute(f"INSERT INTO {GUARD} VALUES (1, 0)")
        cursor.execute(
            f"CREATE TABLE {LEDGER} (id serial PRIMARY KEY, fence bigint NOT NULL, "
            "at timestamptz NOT NULL)"
        )
    yield
    with connections["postgresql"].cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {GUARD}, {LEDGER}")


def faults(cluster: EtcdCluster, until: float) -> list[str]:
    """Kill the leader and restart it, pause the next leader past the election timeout,
    restart a follower; return what was done."""
    done = []
    time.sleep(2)
    leader = cluster.leader()
    cluster.kill(leader)
    done.append(f"killed leader m{leader}")
    time.sleep(2)
    cluster.start_member(leader)
    cluster.wait_healthy()
    done.append(f"restarted m{leader}")
    time.sleep(1)
    leader = cluster.leader()
    cluster.pause(leader)
    time.sleep(4 * cluster.election_ms / 1000)
    cluster.resume(leader)
    done.append(f"paused leader m{leader} for {4 * cluster.election_ms} ms")
    cluster.wait_healthy()
    time.sleep(1)
    follower = next(i for i in range(cluster.size) if i != cluster.leader())
    cluster.kill(follower)
    time.sleep(1)
    cluster.start_member(follower)
    cluster.wait_healthy()
    done.append(f"restarted follower m{follower}")
    while time.monotonic() < until:
        time.sleep(0.1)
    return done


def test_no_overlap_no_stale_write_no_lost_grant_through_failovers(ledger: None) -> None:
    with EtcdCluster(3, top_ports(6, below=6)) as cluster:
        until = time.monotonic() + SECONDS
        workers = multiproc.start(
            take_and_write, [(cluster.endpoints, "failover/", until, 0.02)] * WORKERS
        )
        done = faults(cluster, until)
        results = multiproc.collect(workers, timeout=120)
    spans = sorted(span for result in results for span in result["spans"])
    overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    with connections["postgresql"].cursor() as cursor:
        cursor.execute(f"SELECT fence FROM {LEDGER} ORDER BY id")
        written = [row[0] for row in cursor.fetchall()]
    refused = [f for result in results for f in result["refused"]]
    lost = [f for result in results for f in result["lost"]]
    errors = [e for result in results for e in result["errors"]]
    summary = (
        f"{done}: {len(spans)} grants, {len(written)} writes accepted, {len(refused)} "
        f"refused, {len(lost)} lost at release, {len(errors)} store errors {set(errors)}, "
        f"{len(overlaps)} overlaps"
    )
    print(summary)
    assert len(spans) > 50, summary  # the workers did work through the faults
    assert overlaps == [], summary
    assert written == sorted(set(written)), "a stale write was accepted: " + summary
    assert [fence for _, _, fence in spans] == sorted(set(written)), summary
    assert refused == [] and lost == [], "a grant was acknowledged and then lost: " + summary
