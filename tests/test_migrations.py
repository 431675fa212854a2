"""occupy's migration: it matches the models, and builds the claims table's indexes as
the statements need them on every database, forwards and backwards.

The digest index and the unique slot are declared in ``Meta``: on PostgreSQL,
``db_index`` and ``unique`` on a ``CharField`` would each add a second,
``varchar_pattern_ops`` ("_like") index that no statement uses and every grant and
release writes.
"""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connections, transaction
from django.db.migrations.loader import MigrationLoader
from django.utils import timezone

from occupy.backends.db.dialects import TABLE
from occupy.models import Occupation
from tests.support.aliases import database_params
from tests.support.bulk_claims import count_claims, insert_claims

#: One alias per vendor, whichever database is the default.
VENDORS = ["sqlite", "postgresql", "mysql"]


@pytest.fixture(params=database_params(VENDORS))
def database(request: pytest.FixtureRequest, live_db: None) -> str:
    return request.param


def indexes_on(database: str, column: str) -> list[dict[str, Any]]:
    """Return the indexes and unique constraints of the claims table on ``column`` alone."""
    connection = connections[database]
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, TABLE)
    return [
        {"name": name, **c}
        for name, c in found.items()
        if c["columns"] == [column] and (c["index"] or c["unique"])
    ]


def pattern_indexes(database: str) -> list[str]:
    """Return the claims table's PostgreSQL indexes made for ``LIKE`` ("_like")."""
    with connections[database].cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
            [TABLE, "%pattern_ops%"],
        )
        return [name for (name,) in cursor.fetchall()]


def assert_claims_table_indexed(database: str) -> None:
    """Assert one plain index on ``digest``, one unique on ``slot``, and nothing else on
    either (on PostgreSQL, no "_like" index)."""
    digest, slot = indexes_on(database, "digest"), indexes_on(database, "slot")
    assert len(digest) == 1 and not digest[0]["unique"], digest
    assert len(slot) == 1 and slot[0]["unique"], slot
    if connections[database].vendor == "postgresql":
        assert pattern_indexes(database) == []


def test_the_models_need_no_new_migration(live_db: None) -> None:
    out = io.StringIO()
    call_command("makemigrations", "occupy", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def test_digest_is_indexed_and_slot_unique_with_no_pattern_index(database: str) -> None:
    assert_claims_table_indexed(database)


def test_slot_is_unique_but_null_many_times(database: str) -> None:
    later = timezone.now() + timedelta(minutes=5)
    claims = Occupation.objects.using(database)

    def claim(state: str, token: str) -> Occupation:
        slot, fence = ("d" * 64, 1) if state == "using" else (None, None)
        return claims.create(
            key="k",
            digest="d" * 64,
            slot=slot,
            owner="o",
            token=token,
            state=state,
            fence=fence,
            expires_at=later,
            created_at=later,
        )

    claim("pending", "a")
    claim("pending", "b")  # queued claims have no slot: any number of them
    claim("using", "c")
    with pytest.raises(IntegrityError), transaction.atomic(using=database):
        claim("using", "d")
    assert claims.count() == 3


def test_one_migration_builds_the_table_and_unapplies(database: str) -> None:
    # 0.1.0 ships one migration: what a first release would have folded together.
    assert sorted(
        name
        for (app, name) in MigrationLoader(None, ignore_no_migrations=True).disk_migrations
        if app == "occupy"
    ) == ["0001_initial"]
    quiet = {"database": database, "verbosity": 0}
    try:
        call_command("migrate", "occupy", "zero", **quiet)
        with connections[database].cursor() as cursor:
            assert TABLE not in connections[database].introspection.table_names(cursor)
    finally:
        call_command("migrate", "occupy", **quiet)
    assert_claims_table_indexed(database)
    insert_claims(database, 100, tag="migrated", expired=False)
    assert count_claims(database) == 100
