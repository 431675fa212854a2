"""The Redis backend through real failovers: a primary, two replicas and three sentinels
of the test's own (bench/failover), workers in several processes taking locks through
django-redis's Sentinel client and writing fenced rows to PostgreSQL, the primary
failed over by ``SENTINEL FAILOVER``, ``SIGKILL`` and ``SIGSTOP`` past the sentinels'
down-after time; with ``MIN_REPLICAS = 1``, and ``REPLICAS`` off and on.

A short, bounded run of each (``make bench`` runs the long one and the comparison).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from bench.failover.deployment import deployment_missing
from bench.failover.run import Options, run_failovers
from tests.support.aliases import server_skip

pytestmark = [
    pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or ""),
    pytest.mark.skipif(bool(deployment_missing()), reason=deployment_missing() or ""),
    pytest.mark.skipif(
        "postgresql" not in connections,
        reason=settings.SKIPS.get("postgresql", "PostgreSQL is not the 'postgresql' alias")
        + " (the fenced rows live there)",
    ),
    pytest.mark.multiprocess,
    pytest.mark.slow,
]


@pytest.mark.parametrize("replicas", [0, 1], ids=["no-ack", "replicas-1"])
def test_failovers_grant_nothing_from_a_replaced_primary_and_accept_no_stale_write(
    tmp_path: Path, live_db: None, replicas: int
) -> None:
    options = Options(
        database=connections["postgresql"].settings_dict["NAME"],
        min_replicas=1,
        replicas=replicas,
    )
    result, failovers = run_failovers(tmp_path, options)
    print(f"\nfailovers {failovers}\n{result.row()}\nerrors {dict(result.errors)}")
    assert result.failovers == 3
    assert result.grants > 50, result.row()  # the workers worked through the run
    assert result.writes > 0
    assert result.stale_accepted == 0, result.row()
    assert result.replaced == 0, result.replaced_examples[:5]
    assert result.not_rising == 0, result.row()
    assert result.foreign == [], result.foreign[:3]
