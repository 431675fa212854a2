"""Mutual exclusion proven with several OS processes on the real databases."""

from __future__ import annotations

import itertools

import pytest

import occupy
from tests import multiproc
from tests.conftest import backend_params
from tests.testapp.models import Counter
from tests.workers import database_of, increment, try_acquire

PROCESSES = 4
ROUNDS = 8
HOLD = 0.004

pytestmark = pytest.mark.multiprocess


def assert_exclusive(sections: list[tuple[float, float, int]]) -> None:
    """Fail if two critical sections overlapped or a later grant had a lower fence."""
    sections = sorted(sections)
    for (_, left, fence), (entered, _, next_fence) in itertools.pairwise(sections):
        assert entered >= left, f"two holders overlapped: one left at {left}, next at {entered}"
        assert next_fence > fence, f"fence went down: {fence} then {next_fence}"


@pytest.mark.parametrize("using", backend_params(["default", "db-postgresql", "db-mysql"]))
def test_no_overlap_no_lost_increment_fences_rise(using: str, live_db: None) -> None:
    database = database_of(using)
    Counter.objects.using(database).create(name="stock", value=0)
    results = multiproc.run(increment, [(using, "stock", ROUNDS, HOLD, database)] * PROCESSES)
    sections = [s for result in results for s in result]
    assert len(sections) == PROCESSES * ROUNDS
    assert_exclusive(sections)
    assert Counter.objects.using(database).get(name="stock").value == PROCESSES * ROUNDS


def test_the_probe_catches_lost_updates_without_a_lock(live_db: None) -> None:
    """Without the lock the same workers lose increments, so the test above can fail."""
    Counter.objects.create(name="stock", value=0)
    multiproc.run(increment, [(None, "stock", ROUNDS, HOLD, "default")] * PROCESSES)
    assert Counter.objects.get(name="stock").value < PROCESSES * ROUNDS


@pytest.mark.parametrize("using", backend_params(["default", "db-postgresql", "db-mysql"]))
def test_a_lock_taken_inside_the_callers_transaction_excludes_other_processes(
    using: str, live_db: None
) -> None:
    from django.db import transaction

    with transaction.atomic(using=database_of(using)):
        lease = occupy.acquire("book:1", owner="inside-atomic", using=using)
        # The caller's transaction is still open: the claim must already be visible.
        assert multiproc.run(try_acquire, [(using, "book:1", "other")]) == ["occupied"]
    occupy.release(lease)
    assert multiproc.run(try_acquire, [(using, "book:1", "other")]) == ["acquired"]


@pytest.mark.parametrize("using", backend_params(["default", "db-postgresql", "db-mysql"]))
def test_the_claim_survives_a_rollback_of_the_callers_transaction(
    using: str, live_db: None
) -> None:
    from django.db import transaction

    with pytest.raises(RuntimeError), transaction.atomic(using=database_of(using)):
        lease = occupy.acquire("book:1", owner="inside-atomic", using=using)
        raise RuntimeError("roll back")
    assert occupy.holder("book:1", using=using).owner == "inside-atomic"
    occupy.release(lease)
