"""The workers of the etcd failover test (tests/backends/test_etcd_failover.py).

Each worker takes one key again and again from an etcd backend on the failover cluster
and, holding it, writes a fenced row to PostgreSQL: one transaction raises the guard
row's fence only if the lease's fence is higher (a stale holder's write is refused) and
appends the write to a ledger. Django models are not needed; the tables are the test's.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["GUARD", "LEDGER", "take_and_write"]

GUARD = "etcd_failover_guard"
LEDGER = "etcd_failover_ledger"


def take_and_write(endpoints: list[str], prefix: str, until: float, hold: float) -> dict[str, Any]:
    """Until ``until`` (monotonic), take the key, write a fenced row, release; return the
    spans ``(entered, left, fence)``, the writes refused, the grants lost and the store
    errors seen."""
    from django.db import connections, transaction

    import occupy
    from occupy.backends.etcd import EtcdBackend

    backend = EtcdBackend(
        "failover",
        {
            "BACKEND": "occupy.backends.etcd.EtcdBackend",
            "OPTIONS": {"ENDPOINTS": endpoints, "PREFIX": prefix, "TIMEOUT": 1.0},
        },
    )
    spans: list[tuple[float, float, int]] = []
    refused: list[int] = []
    lost: list[int] = []
    errors: list[str] = []
    while time.monotonic() < until:
        try:
            lease = backend.acquire("failover", owner="worker", ttl=3, timeout=30)
        except occupy.OccupyError as e:
            errors.append(type(e).__name__)
            time.sleep(0.05)
            continue
        entered = time.monotonic()
        with transaction.atomic(using="postgresql"), connections["postgresql"].cursor() as cursor:
            cursor.execute(
                f"UPDATE {GUARD} SET fence = %s WHERE id = 1 AND fence < %s", [lease.fence] * 2
            )
            if cursor.rowcount == 1:
                cursor.execute(
                    f"INSERT INTO {LEDGER} (fence, at) VALUES (%s, clock_timestamp())",
                    [lease.fence],
                )
            else:
                refused.append(lease.fence)
        time.sleep(hold)
        left = time.monotonic()
        spans.append((entered, left, lease.fence))
        try:
            backend.release(lease)
        except occupy.LeaseLost:
            lost.append(lease.fence)
        except occupy.OccupyError as e:
            errors.append(type(e).__name__)  # unknown: the grant ends at its ttl
    backend.close()
    return {"spans": spans, "refused": refused, "lost": lost, "errors": errors}
