"""On PostgreSQL the database backend prepares its statements; their cached plans must
stay lookups by key when the lock table grows after they were made.

A plan is cached from the sixth run of a statement on a connection and kept until the
table's statistics change. Lock tables are small and churn, so that plan is often made
on a table the statistics call empty, where every path looks equally cheap; a
sequential scan, or a range scan of the expiry index, chosen then would read every
claim of every key on every lock once the table has grown.
"""

from __future__ import annotations

import pytest
from django.db import connections

import occupy
from occupy.backends import get_backend
from occupy.backends.db.dialects import TABLE
from tests.support.aliases import backend_params
from tests.support.bulk_claims import insert_claims

pytestmark = pytest.mark.parametrize("alias", backend_params(["db-postgresql"]))


def _analyze() -> None:
    with connections["postgresql"].cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {TABLE}")


def _lock_and_wait(alias: str, key: str) -> None:
    """Take ``key``, queue a second owner behind it, and let it through: every hot
    statement of the waiting path runs once."""
    holder = occupy.acquire(key, owner="holder", ttl=30, backend=alias)
    attempt = get_backend(alias).attempt(key, "waiter", 30)
    assert attempt.try_acquire() is None
    attempt.enqueue()
    assert attempt.try_acquire() is None  # the first promotion after queueing
    occupy.release(holder)
    lease = attempt.try_acquire()  # a later one
    assert lease is not None
    get_backend(alias).extend(lease, 30)
    occupy.release(lease)


def test_cached_plans_stay_index_lookups_when_the_table_grows(alias: str, live_db: None) -> None:
    backend = get_backend(alias)
    backend.close()  # a fresh connection: nothing prepared yet
    # A busy past, then a quiet moment: the indexes keep their size, the statistics
    # now say the table is empty.
    insert_claims("postgresql", 20_000, tag="plan-past", expired=True)
    backend.sweep()
    _analyze()
    for i in range(8):  # past the sixth run: generic plans are cached now
        _lock_and_wait(alias, f"plan:{i}")
    insert_claims("postgresql", 20_000, tag="plan-live", expired=False)
    insert_claims("postgresql", 20_000, tag="plan-expired", expired=True)
    _lock_and_wait(alias, "plan:after")

    rows = backend.store.execute(
        "SELECT name, parameter_types::text[], generic_plans FROM pg_prepared_statements",
        [],
        prepare=False,
    )[1]
    assert len(rows) >= 6, rows  # grant, release, enqueue, promote, extend, …
    scans = {}
    assert any(generic for _, _, generic in rows), rows  # some plans were cached
    for name, types, _ in rows:
        args = ", ".join(f"NULL::{t}" for t in types)
        plan = backend.store.execute(
            f"EXPLAIN EXECUTE {name}({args})" if args else f"EXPLAIN EXECUTE {name}",
            [],
            prepare=False,
        )[1]
        scans[name] = [
            line
            for (line,) in plan
            if "Seq Scan" in line or ("Index" in line and "expires_at" in line.split(" on ")[0])
        ]
    assert not any(scans.values()), scans
