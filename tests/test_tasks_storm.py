"""The task storm: django-tasks-db's worker in several OS processes on PostgreSQL, many
occupy tasks for a few keys, workers SIGKILLed mid-task.

What it proves, from what the runs recorded in PostgreSQL (clock_timestamp()) and the
fences their leases carried:

- no two runs of one key overlap (each starts after the previous one ended, or after the
  killed one was killed) and their fences rise in the order they started;
- with ``occupy_on_busy="retry"``, every enqueued call runs its body exactly once: the
  busy runs enqueued it again until it ran. django-tasks-db does not run again a task
  whose worker was killed (its result stays RUNNING; nothing in the backend reclaims it),
  so a call killed mid-body started once and never ended, and is never run twice;
- a killed worker's key is free again within its ttl plus a second;
- with ``occupy_once``, enqueues from several processes for one key while one is queued
  or running get that task's result: the tasks of one key never wait or run at the same
  time, and every result handed out is one of them; a worker killed mid-task leaves its
  key and its claim free within the ttl plus a second, and the next enqueue makes a
  new task.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections import defaultdict
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

import occupy
from occupy.owners import task_owner
from occupy.taskcore import once_key

if not getattr(settings, "TASKS_DB", False):
    pytest.skip(
        "django-tasks-db (the tasks framework's database backend and worker) is not "
        "installed: pip install 'django-occupy[test]'",
        allow_module_level=True,
    )
if "postgresql" in settings.SKIPS:
    pytest.skip(f"the storm runs on {settings.SKIPS['postgresql']}", allow_module_level=True)
if os.environ.get("OCCUPY_TEST_ONLY_DB") == "1":
    pytest.skip(
        "OCCUPY_TEST_ONLY_DB=1: the storm runs on the postgresql alias whatever the default "
        "database, in make test-slow, not again here",
        allow_module_level=True,
    )

from tests.support import djtasks, djtasks_workers

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

WORKERS = 4
KEYS = 3
ITEMS_PER_KEY = 8
KILLS = 3


@pytest.fixture
def runs(live_db: None) -> Any:
    """The runs table on the PostgreSQL test database, and the task results, emptied."""
    from django_tasks_db.models import DBTaskResult

    pg = connections["postgresql"]
    with pg.cursor() as cursor:
        cursor.execute(djtasks.CREATE_RUNS)
        cursor.execute(f"TRUNCATE {djtasks.RUNS}")
    DBTaskResult.objects.using("postgresql").all().delete()
    yield pg
    DBTaskResult.objects.using("postgresql").all().delete()
    with pg.cursor() as cursor:
        cursor.execute(f"DROP TABLE {djtasks.RUNS}")


def _rows(pg: Any, kind: str) -> list[tuple[Any, ...]]:
    with pg.cursor() as cursor:
        cursor.execute(
            f"SELECT item, key, fence, result_id, pid, started_at, ended_at FROM {djtasks.RUNS} "
            "WHERE kind = %s ORDER BY started_at",
            [kind],
        )
        return list(cursor.fetchall())


def _now(pg: Any) -> Any:
    with pg.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def _stop(procs: list[Any]) -> None:
    for proc in procs:
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)


def _enqueue(calls: list[tuple[str, dict[str, int]]], processes: int) -> list[tuple[Any, str]]:
    """Enqueue ``calls`` from ``processes`` processes; return the (key, result id) pairs."""
    out = djtasks_workers.queue()
    enqueuers = [djtasks_workers.start_enqueuer(calls[i::processes], out) for i in range(processes)]
    got: list[tuple[Any, str]] = []
    for _ in enqueuers:
        got.extend(out.get(timeout=120))
    for proc in enqueuers:
        proc.join(30)
    return got


def _kill_one_mid_task(
    pg: Any, workers: list[Any], *, claim: bool = False
) -> tuple[Any, str, Any, float] | None:
    """SIGKILL a worker whose body is running; return its pid, key, the kill's time on
    the database's clock and the seconds until its key was free again (and, with
    ``claim``, its enqueue-once claim as well)."""
    alive = {proc.pid: proc for proc in workers if proc.is_alive()}
    with pg.cursor() as cursor:
        cursor.execute(
            f"SELECT pid, key, result_id FROM {djtasks.RUNS} "
            "WHERE ended_at IS NULL AND pid = ANY(%s) "
            "ORDER BY started_at DESC LIMIT 1",
            [list(alive)],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    pid, key, result_id = row
    os.kill(pid, signal.SIGKILL)
    dead = time.monotonic()
    killed_at = _now(pg)
    alive[pid].join(10)
    fence = _killed_fence(pg, pid, key)

    def held() -> bool:  # by the killed worker's run
        current = occupy.holder(key, backend=djtasks.ALIAS)
        if current is not None and current.fence <= fence:
            return True
        if not claim:
            return False
        once = occupy.holder(once_key(djtasks.once.module_path, key), backend=djtasks.ALIAS)
        return once is not None and once.owner == task_owner(djtasks.once.module_path, result_id)

    return pid, key, killed_at, _free_after(dead, held)


def _free_after(dead: float, held: Any) -> float:
    """Return the seconds from ``dead`` until ``held()`` is false (at most 30)."""
    while held() and time.monotonic() - dead < 30:
        time.sleep(0.02)
    return time.monotonic() - dead


def _killed_fence(pg: Any, pid: int, key: str) -> int:
    with pg.cursor() as cursor:
        cursor.execute(
            f"SELECT max(fence) FROM {djtasks.RUNS} WHERE pid = %s AND key = %s", [pid, key]
        )
        return int(cursor.fetchone()[0])


def test_storm_runs_each_call_once_per_key_through_killed_workers(runs: Any) -> None:
    from django_tasks_db.models import DBTaskResult

    pg = runs
    calls = [("storm", {"key": item % KEYS, "item": item}) for item in range(KEYS * ITEMS_PER_KEY)]
    # Everything is queued before the workers start, so that the kills below find bodies
    # running from the first run on.
    _enqueue(calls, processes=2)
    workers = [djtasks_workers.start_worker(f"storm-{i}") for i in range(WORKERS)]
    kills: list[tuple[Any, str, Any, float]] = []
    try:
        deadline = time.monotonic() + 150
        next_kill = time.monotonic()
        while time.monotonic() < deadline:
            done = {row[0] for row in _rows(pg, "storm")}
            if (
                len(done) == len(calls)
                and not DBTaskResult.objects.using("postgresql").filter(status="READY").exists()
            ):
                break
            if len(kills) < KILLS and time.monotonic() > next_kill and len(done) < len(calls) - 2:
                kill = _kill_one_mid_task(pg, workers)
                if kill is not None:
                    kills.append(kill)
                    workers.append(djtasks_workers.start_worker(f"storm-{len(workers)}"))
                    next_kill = time.monotonic() + 1.5
            time.sleep(0.02)
        # Let the last runs end: their bodies started, and they end whatever the load.
        _wait_for_the_queue_to_drain(pg, {pid for pid, *_ in kills}, within=60)
    finally:
        _stop(workers)

    rows = _rows(pg, "storm")
    retried = DBTaskResult.objects.using("postgresql").count() - len(calls)
    print(
        f"\ntask storm: {len(calls)} calls on {KEYS} keys, {retried} busy runs enqueued "
        f"again, {len(kills)} workers killed mid-task, keys free after "
        + ", ".join(f"{free:.2f} s" for *_, free in kills)
        + f" (ttl {djtasks.STORM_TTL:g} s)"
    )
    killed_pids = {pid for pid, *_ in kills}

    # No overlap per key, by the recorded intervals and by the fences.
    kill_time = {pid: at for pid, _key, at, _free in kills}
    by_key = defaultdict(list)
    for row in rows:
        by_key[row[1]].append(row)
    for key, key_rows in by_key.items():
        for before, after in itertools.pairwise(key_rows):
            end = before[6] if before[6] is not None else kill_time[before[4]]
            assert after[5] >= end, f"{key}: {after} started before {before} ended"
            assert after[2] > before[2], f"{key}: fences not rising: {before} then {after}"

    # Every call ran its body exactly once; the killed ones started and never ended.
    started = defaultdict(list)
    for row in rows:
        started[row[0]].append(row)
    assert sorted(started) == list(range(len(calls))), "a call never ran"
    twice = {item: len(r) for item, r in started.items() if len(r) != 1}
    assert not twice, f"calls run more than once: {twice}"
    unfinished = {row[0] for row in rows if row[6] is None}
    assert all(started[item][0][4] in killed_pids for item in unfinished)
    assert len(unfinished) == len(kills)
    assert len(kills) >= 1, "no worker was killed mid-task"

    # A killed worker's key was free again within its ttl and a second.
    for pid, key, _at, free_after in kills:
        assert free_after <= djtasks.STORM_TTL + 1, (
            f"{key} held {free_after:.2f} s after its worker {pid} was killed"
        )

    # The backend's view: no task left waiting; each killed run's result stays RUNNING
    # (django-tasks-db does not reclaim it), and no other result is.
    results = DBTaskResult.objects.using("postgresql")
    assert not results.filter(status="READY").exists()
    running = set(results.filter(status="RUNNING").values_list("id", flat=True))
    assert {str(r) for r in running} == {started[item][0][3] for item in unfinished}


def _wait_for_the_queue_to_drain(pg: Any, killed_pids: set[int], within: float) -> None:
    """Wait up to ``within`` seconds until no task is queued or running but those whose
    worker (one of ``killed_pids``) was killed mid-body: the backend leaves their
    results RUNNING. A run that has not ended yet is waited for, not taken for one of
    those."""
    from django_tasks_db.models import DBTaskResult

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with pg.cursor() as cursor:
            cursor.execute(
                f"SELECT result_id FROM {djtasks.RUNS} WHERE ended_at IS NULL AND pid = ANY(%s)",
                [list(killed_pids)],
            )
            killed_ids = {row[0] for row in cursor.fetchall()}
        pending = (
            DBTaskResult.objects.using("postgresql")
            .filter(status__in=["READY", "RUNNING"])
            .exclude(id__in=killed_ids)
        )
        if not pending.exists():
            return
        time.sleep(0.1)


def test_enqueue_once_never_queues_a_second_task_for_a_key(runs: Any) -> None:
    from django_tasks_db.models import DBTaskResult

    pg = runs
    keys = 2
    calls = [("once", {"key": i % keys}) for i in range(150)]
    workers = [djtasks_workers.start_worker(f"once-{i}") for i in range(2)]
    out = djtasks_workers.queue()
    processes = 3
    enqueuers = [djtasks_workers.start_enqueuer(calls[i::processes], out) for i in range(processes)]
    kill = None
    try:
        # While the enqueues go on, kill a worker in the middle of a body.
        give_up = time.monotonic() + 60
        while kill is None and time.monotonic() < give_up:
            kill = _kill_one_mid_task(pg, workers, claim=True)
            time.sleep(0.02)
        if kill is not None:
            workers.append(djtasks_workers.start_worker("once-again"))
        got: list[tuple[Any, str]] = []
        for _ in enqueuers:
            got.extend(out.get(timeout=120))
        for proc in enqueuers:
            proc.join(30)
        _wait_for_the_queue_to_drain(pg, set() if kill is None else {kill[0]}, within=60)
    finally:
        _stop(workers)
        for proc in enqueuers:
            _stop([proc])

    results = {
        str(r.id): r
        for r in DBTaskResult.objects.using("postgresql").filter(task_path__endswith=".once")
    }
    print(
        f"\nenqueue-once: {len(calls)} enqueues from {processes} processes made "
        f"{len(results)} tasks; a worker killed mid-task, its key and claim free after "
        + ("-" if kill is None else f"{kill[3]:.2f} s")
    )
    handed_out = {result_id for _key, result_id in got}
    assert handed_out == set(results), "a result was handed out that is no task, or vice versa"
    assert len(results) < len(calls) / 3, f"{len(results)} tasks for {len(calls)} enqueues"
    rows = _rows(pg, "once")
    ran = {row[3]: row for row in rows}
    assert set(ran) == set(results), "a queued task never ran"
    assert kill is not None, "no worker was killed mid-task"
    pid, key, killed_at, _free = kill
    [killed] = [row for row in rows if row[4] == pid and row[6] is None]
    # While a task of a key is queued or running (enqueued .. its body ended, or its
    # worker was killed), no other task of that key is enqueued.
    by_key = defaultdict(list)
    for result_id, result in results.items():
        end = ran[result_id][6] if result_id != killed[3] else killed_at
        by_key[result.args_kwargs["kwargs"]["key"]].append((result.enqueued_at, end, result_id))
    for k, spans in by_key.items():
        spans.sort()
        for (_s1, end1, id1), (start2, _e2, id2) in itertools.pairwise(spans):
            assert start2 >= end1, f"key {k}: {id2} enqueued while {id1} was queued/running"
    # The killed task's key and enqueue-once claim were free within its ttl and a second
    # of the kill; its result is still RUNNING (the backend does not reclaim it).
    assert _free <= djtasks.STORM_TTL + 1, f"{key} or its claim held {_free:.2f} s after the kill"
    assert str(results[killed[3]].status) == "RUNNING"
