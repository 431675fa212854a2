"""Every batch of a sweep finds its claims through the expiry index, on every database,
and a dry run lists every claim it counts.

Before, PostgreSQL's batch asked for ``((expires_at <= now OR expires_at > farthest))
IS TRUE``, which no index serves: each batch of 1,000 scanned the table (and, the scan
priced at the disabled ``enable_seqscan``'s cost, was compiled by the JIT), so a sweep
ran at about 12,000 rows a second whatever the backlog. Each half of the predicate is
now a range of the index, walked in its order.

The statements are the ones the sweep runs, caught as it runs them; each is explained
with its parameters on a table of 5,000 expired and 200 live claims.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import connections

from occupy.backends import get_backend
from occupy.backends.db import DatabaseBackend
from occupy.backends.db.dialects import TABLE
from tests.support.aliases import DATABASE_BACKENDS, backend_params
from tests.support.bulk_claims import count_claims, insert_claims


@pytest.fixture(params=backend_params(DATABASE_BACKENDS))
def backend(request: pytest.FixtureRequest, live_db: None) -> DatabaseBackend:
    built = get_backend(request.param)
    assert isinstance(built, DatabaseBackend)
    return built


def _expiry_index(database: str) -> str:
    connection = connections[database]
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, TABLE)
    (name,) = [n for n, c in found.items() if c["index"] and c["columns"] == ["expires_at"]]
    return name


def _plan(backend: DatabaseBackend, sql: str, params: list[Any]) -> list[str]:
    vendor = connections[backend.database].vendor
    explain = {"sqlite": "EXPLAIN QUERY PLAN "}.get(vendor, "EXPLAIN ")
    rows = backend.store.execute(explain + sql, params, prepare=False)[1]
    if vendor == "mysql":  # id, select_type, table, type, possible_keys, key, …
        return [f"{row[2]} type={row[3]} key={row[5]}" for row in rows]
    return [str(row[-1]) for row in rows]


def _uses_index_ranges_only(vendor: str, plan: list[str], index: str) -> bool:
    if vendor == "postgresql":
        # A window is one range, which may be read as a bitmap of it: the table's pages
        # are then visited in their order. Never a scan of the table.
        text = "\n".join(plan)
        return (
            f"Index Scan using {index}" in text
            or f"Index Only Scan using {index}" in text
            or f"Bitmap Index Scan on {index}" in text
        ) and not any("Seq Scan" in line for line in plan)
    if vendor == "mysql":
        return plan == [f"{TABLE} type=range key={index}"]
    # SQLite: the batch's SELECT searches the index; the DELETE finds rows by id.
    return any(f"INDEX {index} (expires_at" in line for line in plan) and not any(
        line.startswith(f"SCAN {TABLE}") for line in plan
    )


@pytest.mark.parametrize("listing", [False, True], ids=["quiet", "listing keys"])
def test_every_sweep_batch_is_a_range_of_the_expiry_index(
    backend: DatabaseBackend, listing: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = backend.database
    vendor = connections[database].vendor
    insert_claims(database, 5_000, tag="expired", expired=True)
    insert_claims(database, 200, tag="live", expired=False)
    if vendor == "postgresql":  # statistics that know the table's size
        with connections[database].cursor() as cursor:
            cursor.execute(f"ANALYZE {TABLE}")
    plans: dict[str, list[str]] = {}
    execute = backend.store.execute

    def explaining(sql: str, params: list[Any], **kwargs: Any) -> Any:
        if sql.startswith(("DELETE", "SELECT (SELECT min")) and sql not in plans:
            plans[sql] = _plan(backend, sql, params)
        return execute(sql, params, **kwargs)

    monkeypatch.setattr(backend.store, "execute", explaining)
    removed: list[str] = []
    swept = backend.sweep(batch_size=1000, removed=removed.append if listing else None)

    assert swept == 5_000 and count_claims(database) == 200
    assert len(removed) == (5_000 if listing else 0)
    index = _expiry_index(database)
    assert plans and all(_uses_index_ranges_only(vendor, plan, index) for plan in plans.values()), (
        plans
    )


def test_a_dry_run_lists_every_claim_it_counts_those_beyond_the_longest_ttl_too(
    backend: DatabaseBackend,
) -> None:
    # Before, the listing (-v 2) asked only for claims whose expiry had passed: a claim
    # that says it lives beyond the longest ttl was counted and swept, never listed.
    from tests.backends.test_db_planted import FAR, _plant

    _plant(backend.alias, "planted", "pending", FAR)
    insert_claims(backend.database, 3, tag="expired", expired=True)
    listed: list[str] = []
    assert backend.sweep(dry_run=True) == 4
    assert backend.sweep(dry_run=True, removed=listed.append) == 4
    assert sorted(listed) == ["expired:1", "expired:2", "expired:3", "planted"]
    assert backend.sweep(removed=listed.append) == 4
    assert count_claims(backend.database) == 0


def test_claims_that_share_an_expiry_or_lie_years_apart_take_few_statements(
    backend: DatabaseBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep in windows of expiry (PostgreSQL) deletes claims that share an expiry to
    # the microsecond in one window whatever the batch size, and after an empty window
    # (a gap of years) probes for the next claim rather than widen the window step by
    # step (some 50 doublings from a microsecond to ten years).
    from tests.backends.test_db_planted import _plant

    now = datetime.now(timezone.utc)
    for group, ago in enumerate([timedelta(days=3650), timedelta(days=1), timedelta(seconds=5)]):
        for n in range(4):
            _plant(backend.alias, f"expired:{group}:{n}", "pending", now - ago)
    insert_claims(backend.database, 3, tag="live", expired=False)
    statements: list[str] = []
    execute = backend.store.execute

    def counting(sql: str, params: list[Any], **kwargs: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, **kwargs)

    monkeypatch.setattr(backend.store, "execute", counting)
    assert backend.sweep(batch_size=1) == 12
    assert count_claims(backend.database) == 3
    # LIMIT batches: 12 of one claim and an empty one, then the far half's; windows:
    # per group a probe, the window, an empty one; a last probe; the far half's batch.
    assert len(statements) <= 14, statements
