"""Storms of OccupyTask tasks on real Celery prefork workers, on RabbitMQ and on Redis as
broker, with pool processes killed (SIGKILL) in the middle of tasks.

Each run records its start and end (PostgreSQL's clock) and makes a fenced write. The
assertions: no two runs of a key overlap, by their intervals (a killed run's interval
ends when its key was seen free) and by their fences; every enqueued task ran to its end
exactly once ("retry"); each killed run's key was free again within its ttl plus a
second; with ``occupy_once`` no second task was enqueued for a key while one was queued
or running.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from django.conf import settings

import occupy
from occupy.owners import celery_task_owner
from tests.support import celery_procs as cp

pytest.importorskip("celery")

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TTL = 2.0
KEYS = ["a", "b", "c"]


def _broker_skip(broker: str) -> str | None:
    if broker == "rabbitmq" and not settings.RABBITMQ_UP:
        return "RabbitMQ (127.0.0.1:5672 not answering)"
    if broker == "redis" and "redis" in settings.SKIPS:
        return settings.SKIPS["redis"]
    if "postgresql" in settings.SKIPS:
        return settings.SKIPS["postgresql"]
    return None


#: (broker, its URL, the occupy backend the locks live in)
BROKERS = [
    pytest.param("rabbitmq", cp.RABBITMQ_URL, "db-postgresql", id="rabbitmq-db"),
    pytest.param("redis", cp.REDIS_URL, "redis", id="redis-redis"),
]


@pytest.fixture
def tables(live_db: None, tmp_path: Path):
    cp.create_tables(KEYS)
    yield tmp_path
    cp.drop_tables()


def _assert_no_overlap_and_rising_fences(runs: list, killed_rows: dict) -> None:
    """No two runs of a key overlap (a killed run's lasts until its key was seen free),
    and fences rise in the order of the runs."""
    by_key = defaultdict(list)
    for row_id, _task, key, fence, started, end, _ok in runs:
        end = end if end is not None else killed_rows[row_id]["seen_free"]
        by_key[key].append((started, end, fence))
    for key, intervals in by_key.items():
        intervals.sort()
        for (s1, e1, f1), (s2, _e2, f2) in itertools.pairwise(intervals):
            assert e1 <= s2, f"runs of {key} overlap: {s1}–{e1} and one from {s2}"
            assert f1 < f2, f"fences of {key} do not rise: {f1} then {f2}"


@pytest.mark.parametrize(("broker", "url", "locks"), BROKERS)
def test_storm_no_overlap_exactly_once_and_killed_keys_free(broker, url, locks, tables):
    why = _broker_skip(broker)
    if why:
        pytest.skip(why)
    queue = f"{cp.QUEUE_PREFIX}-storm-{broker}"
    cp.purge(url, queue)
    environ = cp.env(url, queue, locks, TTL)
    workers = [cp.worker_command(f"storm{i}{settings.SUFFIX}", queue, 2) for i in range(2)]
    kills: list[dict] = []
    try:
        with cp.processes(workers, environ, tables):
            ids = cp.sent(cp.enqueue(environ, "storm", 4, KEYS))
            assert len(ids) == 12
            # Kill three runs in the middle of their body (a pool process SIGKILLed, as
            # the OOM killer does), each a fresh run of at most 0.3 s of its 0.8.
            deadline = time.monotonic() + 90
            while len(kills) < 3 and time.monotonic() < deadline:
                rows = cp.sql(
                    "SELECT id, task_id, key, pid FROM celery_runs WHERE ended IS NULL "
                    "AND started > clock_timestamp() - interval '0.3 seconds' "
                    "AND pid <> ALL(%s) ORDER BY started LIMIT 1",
                    [[k["pid"] for k in kills] or [0]],
                )
                if not rows:
                    time.sleep(0.02)
                    continue
                row_id, task_id, key, pid = rows[0]
                os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
                owner = celery_task_owner("tests.support.celery_app.storm", task_id)

                def released(key=key, owner=owner) -> bool:
                    current = occupy.holder(f"storm:{key}", backend=locks)
                    return current is None or current.owner != owner

                cp.wait_for(released, TTL + 10, f"the killed run's key storm:{key}")
                kills.append(
                    {
                        "row": row_id,
                        "pid": pid,
                        "key": key,
                        "stuck": time.monotonic() - killed_at,
                        "seen_free": cp.db_now(),
                    }
                )
            assert len(kills) == 3, f"only {len(kills)} runs could be killed mid-task"

            def all_ended() -> bool:
                (done,) = cp.sql(
                    "SELECT count(DISTINCT task_id) FROM celery_runs WHERE ended IS NOT NULL"
                )[0]
                return done >= len(ids)

            cp.wait_for(all_ended, 150, "every enqueued task to run to its end")
            time.sleep(TTL + 1)  # a duplicate run would start within this
    finally:
        cp.purge(url, queue)

    runs = cp.sql("SELECT id, task_id, key, fence, started, ended, fenced_ok FROM celery_runs")
    killed_rows = {k["row"]: k for k in kills}
    # Killed runs never recorded an end (the kill came mid-body) ...
    for row_id in killed_rows:
        assert next(r for r in runs if r[0] == row_id)[5] is None
    # ... and every other run did, once per task: exactly once, none lost.
    ended = Counter(r[1] for r in runs if r[5] is not None)
    assert sorted(ended) == sorted(ids), "a task was lost or an unknown one ran"
    assert set(ended.values()) == {1}, f"tasks ran to their end twice: {ended}"
    assert all(r[6] for r in runs if r[5] is not None), "a live holder's fenced write was refused"
    _assert_no_overlap_and_rising_fences(runs, killed_rows)
    # The fenced writes: one per completed run, each by a newer grant.
    for key, writes in cp.sql("SELECT key, writes FROM celery_resource"):
        assert writes == sum(1 for r in runs if r[2] == key and r[5])
    # A killed worker's key was free within its ttl plus a second.
    stuck = [round(k["stuck"], 2) for k in kills]
    assert max(stuck) <= TTL + 1, f"keys stayed held after a kill: {stuck} s (ttl {TTL})"


@pytest.mark.parametrize(("broker", "url", "locks"), BROKERS)
def test_once_enqueues_no_duplicate(broker, url, locks, tables):
    why = _broker_skip(broker)
    if why:
        pytest.skip(why)
    queue = f"{cp.QUEUE_PREFIX}-once-{broker}"
    cp.purge(url, queue)
    environ = cp.env(url, queue, locks, TTL, OCCUPY_TEST_CELERY_BODY="3")
    keys = ["x", "y"]
    try:
        with cp.processes([cp.worker_command(f"once{settings.SUFFIX}", queue, 2)], environ, tables):
            # Four processes enqueue each key five times at once (8 s from now: they
            # start one after another), well within the first run's 3 s.
            at = time.time() + 8
            senders = [cp.enqueue(environ, "once", 5, keys, at) for _ in range(4)]
            ids = [cp.sent(p) for p in senders]

            def ran() -> bool:
                return len(cp.sql("SELECT 1 FROM celery_runs")) >= len(keys)

            cp.wait_for(ran, 60, "the tasks to run")
            time.sleep(TTL + 2.5)  # a duplicate would run within this
            runs = cp.sql("SELECT task_id, key FROM celery_runs")
            # Once the first has ended, the key can be enqueued again.
            later = cp.sent(cp.enqueue(environ, "once", 1, keys))
    finally:
        cp.purge(url, queue)
    for i, key in enumerate(keys):
        returned = {sender[n * len(keys) + i] for sender in ids for n in range(5)}
        assert len(returned) == 1, f"{key}: {len(returned)} tasks enqueued at once"
        assert [r[0] for r in runs if r[1] == key] == list(returned)
    assert not set(later) & {r[0] for r in runs}, "a new enqueue after the end was deduplicated"
