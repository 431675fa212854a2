"""Mutual exclusion proven with several OS processes on the real databases."""

from __future__ import annotations

import pytest

import occupy
from tests.support import multiproc
from tests.support.aliases import backend_params
from tests.support.exclusion import (
    assert_exclusive,
    count_under_lock,
    database_of,
    taken_over_after_kill,
    try_acquire,
)
from tests.testapp.models import Counter

PROCESSES = 4
ROUNDS = 8
HOLD = 0.004
DATABASE_BACKENDS = backend_params(["default", "db-postgresql", "db-mysql"])

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("alias", DATABASE_BACKENDS)
def test_no_overlap_no_lost_increment_fences_rise(alias: str, live_db: None) -> None:
    database = database_of(alias)
    Counter.objects.using(database).create(name="stock", value=0)
    results = multiproc.run(
        count_under_lock, [(alias, "stock", ROUNDS, HOLD, database)] * PROCESSES
    )
    assert sum(len(r) for r in results) == PROCESSES * ROUNDS
    assert_exclusive(results, "stock", database)


def test_the_probe_catches_lost_updates_without_a_lock(live_db: None) -> None:
    """Without the lock the same workers lose increments, so the test above can fail."""
    Counter.objects.create(name="stock", value=0)
    multiproc.run(count_under_lock, [(None, "stock", ROUNDS, HOLD)] * PROCESSES)
    assert Counter.objects.get(name="stock").value < PROCESSES * ROUNDS


@pytest.mark.parametrize("alias", DATABASE_BACKENDS)
def test_a_killed_holders_key_is_free_within_its_ttl_plus_a_second(
    alias: str, live_db: None
) -> None:
    assert taken_over_after_kill(alias, "book:1", ttl=2.0) <= 3.0


@pytest.mark.parametrize("alias", DATABASE_BACKENDS)
def test_a_lock_taken_inside_the_callers_transaction_excludes_other_processes(
    alias: str, live_db: None
) -> None:
    from django.db import transaction

    with transaction.atomic(using=database_of(alias)):
        lease = occupy.acquire("book:1", owner="inside-atomic", backend=alias)
        # The caller's transaction is still open: the claim must already be visible.
        assert multiproc.run(try_acquire, [(alias, "book:1", "other")]) == ["occupied"]
    occupy.release(lease)
    assert multiproc.run(try_acquire, [(alias, "book:1", "other")]) == ["acquired"]


@pytest.mark.parametrize("alias", DATABASE_BACKENDS)
def test_the_claim_survives_a_rollback_of_the_callers_transaction(
    alias: str, live_db: None
) -> None:
    from django.db import transaction

    with pytest.raises(RuntimeError), transaction.atomic(using=database_of(alias)):
        lease = occupy.acquire("book:1", owner="inside-atomic", backend=alias)
        raise RuntimeError("roll back")
    assert occupy.holder("book:1", backend=alias).owner == "inside-atomic"
    occupy.release(lease)
