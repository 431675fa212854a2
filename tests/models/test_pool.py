"""claim(): seed 004's task pool, in several processes and edge by edge."""

from __future__ import annotations

import multiprocessing
import threading
import time
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone

import occupy
from tests.support import model_workers, multiproc
from tests.support.aliases import BACKEND_OF
from tests.testapp.models import Task


def make_tasks(database: str, count: int) -> list[Task]:
    return [Task.objects.using(database).create(title=f"t{n}") for n in range(count)]


# --- several processes ------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.slow  # seconds of claiming per database: make test-slow, which CI runs
def test_claimers_never_share_a_task_and_hold_one_each(database: str) -> None:
    """Three editors keep claiming, working on and releasing tasks from a pool of three
    while a fourth claims one and vanishes: a task is never held by two owners, an
    owner never holds two, and the vanished editor's task comes back to the pool."""
    backend = BACKEND_OF[database]
    make_tasks(database, 3)
    editors = multiproc.start(
        model_workers.claim_loop, [(database, backend, f"editor{n}", 3.0, 0.01) for n in range(3)]
    )
    abandoned_pk, abandoned_fence = multiproc.run(
        model_workers.abandon, [(database, backend, "vanished", 1.0)], timeout=60
    )[0]
    results = multiproc.collect(editors, timeout=120)
    claims = [claim for log, _ in results for claim in log]
    assert [problem for _, problems in results for problem in problems] == []
    assert len(claims) > 20, claims
    assert {pk for pk, _ in claims} == {t.pk for t in Task.objects.using(database)}
    # Claimed again after the vanished editor's lease ran out (fences only grow).
    assert any(pk == abandoned_pk and fence > abandoned_fence for pk, fence in claims)


@pytest.mark.multiprocess
def test_a_task_finished_meanwhile_is_not_handed_out_again(database: str) -> None:
    """Editors finish tasks (mark them done, release) as fast as they can: a claimer
    whose candidate was finished between its query and its lock lets it go, so each
    task is finished exactly once."""
    backend = BACKEND_OF[database]
    made = make_tasks(database, 30)
    results = multiproc.run(
        model_workers.finish_tasks,
        [(database, backend, f"editor{n}") for n in range(3)],
        timeout=120,
    )
    finished = sorted(pk for result in results for pk in result)
    assert finished == sorted(task.pk for task in made)


@pytest.mark.multiprocess
def test_one_owner_claiming_from_two_processes_gets_one_task(server: str) -> None:
    """Two requests of the same editor claim at the same moment: both get the same
    task and lease (on PostgreSQL and MariaDB a second claimer would otherwise skip the
    first's row and take another)."""
    backend = BACKEND_OF[server]
    make_tasks(server, 4)
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    first, second = multiproc.run(
        model_workers.claim_as,
        [
            (server, backend, "editor", 5, True, barrier),
            (server, backend, "editor", 5, False, barrier),
        ],
        timeout=120,
    )
    assert first == second


# --- one process ---------------------------------------------------------------------------
def test_claim_hands_out_each_task_once(database: str) -> None:
    backend = BACKEND_OF[database]
    tasks = Task.objects.using(database)
    assert tasks.claim(owner="alice", backend=backend) is None  # an empty pool
    made = make_tasks(database, 2)
    alice = tasks.claim(owner="alice", ttl=30, backend=backend)
    bob = tasks.claim(owner="bob", ttl=30, backend=backend)
    assert (alice.pk, bob.pk) == (made[0].pk, made[1].pk)
    assert alice.lease.key == f"testapp.task:{alice.pk}" and alice.lease.owner == "alice"
    assert alice.get_holder(backend=backend).owner == "alice"
    assert tasks.claim(owner="carol", backend=backend) is None  # everything is held
    occupy.release(alice.lease)
    carol = tasks.claim(owner="carol", backend=backend)
    assert carol.pk == alice.pk and carol.lease.fence > alice.lease.fence
    occupy.release(bob.lease)
    occupy.release(carol.lease)


def test_claim_skips_a_task_another_transaction_row_locks(database: str) -> None:
    """A transaction elsewhere holds ``FOR UPDATE`` on the first free task: claim()
    hands out the second at once instead of waiting for that transaction."""
    if database == "sqlite":
        pytest.skip("SQLite has no row locks: a writer locks the whole database")
    backend = BACKEND_OF[database]
    first, second, _ = make_tasks(database, 3)
    locked, done = threading.Event(), threading.Event()

    def lock_first_row() -> None:
        try:
            with transaction.atomic(using=database):
                Task.objects.using(database).select_for_update().get(pk=first.pk)
                locked.set()
                done.wait(5)  # bounded: claim() without SKIP LOCKED blocks until then
        finally:
            connections[database].close()

    thread = threading.Thread(target=lock_first_row)
    thread.start()
    try:
        assert locked.wait(10)
        started = time.monotonic()
        item = Task.objects.using(database).claim(owner="alice", ttl=30, backend=backend)
        elapsed = time.monotonic() - started
    finally:
        done.set()
        thread.join(10)
    assert item.pk == second.pk and elapsed < 1, (item.pk, elapsed)
    occupy.release(item.lease)


def test_the_same_owner_gets_the_same_task_and_lease_again(database: str) -> None:
    backend = BACKEND_OF[database]
    make_tasks(database, 3)
    tasks = Task.objects.using(database)
    first = tasks.claim(owner="alice", ttl=30, backend=backend)
    time.sleep(0.05)
    again = tasks.claim(owner="alice", ttl=60, backend=backend)
    assert again.pk == first.pk
    assert (again.lease.token, again.lease.fence) == (first.lease.token, first.lease.fence)
    assert again.lease.expires_at == first.lease.expires_at  # not renewed by asking
    occupy.release(again.lease)
    assert occupy.holder(first.lease.key, backend=backend) is None


def test_an_expired_claim_goes_back_to_the_pool(database: str) -> None:
    backend = BACKEND_OF[database]
    (task,) = make_tasks(database, 1)
    tasks = Task.objects.using(database)
    gone = tasks.claim(owner="gone", ttl=0.3, backend=backend)
    assert tasks.claim(owner="bob", backend=backend) is None
    time.sleep(0.45)
    bob = tasks.claim(owner="bob", ttl=30, backend=backend)
    assert bob.pk == task.pk and bob.lease.fence > gone.lease.fence
    fresh = tasks.claim(owner="gone", backend=backend)  # its old claim does not count
    assert fresh is None
    occupy.release(bob.lease)


def test_claim_order_and_the_pool_filter(database: str) -> None:
    backend = BACKEND_OF[database]
    tasks = Task.objects.using(database)
    now = timezone.now()
    old = tasks.create(title="old", created_at=now - timedelta(hours=1))
    urgent = tasks.create(title="urgent", priority=9, created_at=now)
    tasks.create(title="done", priority=10, done=True, created_at=now - timedelta(hours=2))
    pool = tasks.filter(done=False)
    first = pool.claim(owner="a", backend=backend, order_by=("-priority", "created_at"))
    second = pool.order_by("created_at").claim(owner="b", backend=backend)
    assert (first.pk, second.pk) == (urgent.pk, old.pk)
    assert pool.claim(owner="c", backend=backend) is None
    for item in (first, second):
        occupy.release(item.lease)


def test_a_held_task_that_left_the_pool_does_not_count(database: str) -> None:
    backend = BACKEND_OF[database]
    make_tasks(database, 2)
    pool = Task.objects.using(database).filter(done=False)
    first = pool.claim(owner="alice", backend=backend)
    Task.objects.using(database).filter(pk=first.pk).update(done=True)
    second = pool.claim(owner="alice", backend=backend)
    assert second.pk != first.pk
    occupy.release(first.lease)
    occupy.release(second.lease)


def test_claim_checks_its_arguments(tables: None) -> None:
    with pytest.raises(ValueError, match="ttl"):
        Task.objects.claim(owner="a", ttl=-1)
    with pytest.raises(TypeError, match="owner"):
        Task.objects.claim(owner=7)
