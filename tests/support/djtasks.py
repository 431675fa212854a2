"""Tasks of Django's tasks framework for occupy.tasks' tests, and the worker processes of
the storm: django-tasks-db's own worker, in spawned processes on the PostgreSQL test
database, each run recording its start and end there (table :data:`RUNS`)."""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

from django.db import connections

from occupy.tasks import current_lease, task

_ctx = multiprocessing.get_context("spawn")
#: Where each run of a storm task records itself (made by the test, on PostgreSQL).
RUNS = "occupy_djtasks_runs"
#: The occupy backend the storm's leases live on: the PostgreSQL test database, the same
#: alias in the test process and in the workers.
USING = "db-postgresql"
#: The storm's lease ttl (seconds): a killed worker's key must be free within it + 1 s.
STORM_TTL = 2.0
#: How long each storm run's body lasts (seconds).
BODY = 0.4

CREATE_RUNS = f"""
CREATE TABLE IF NOT EXISTS {RUNS} (
    id bigserial PRIMARY KEY,
    kind text NOT NULL,
    item integer NOT NULL,
    key text NOT NULL,
    fence bigint NOT NULL,
    result_id text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at timestamptz
)
"""


def _record(kind: str, item: int, key: str, result_id: str) -> None:
    lease = current_lease()
    with connections["postgresql"].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {RUNS} (kind, item, key, fence, result_id, pid, started_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, clock_timestamp()) RETURNING id",
            [kind, item, key, lease.fence, result_id, os.getpid()],
        )
        (row,) = cursor.fetchone()
    time.sleep(BODY)
    lease.ensure_held()
    with connections["postgresql"].cursor() as cursor:
        cursor.execute(f"UPDATE {RUNS} SET ended_at = clock_timestamp() WHERE id = %s", [row])


def _result_id(context: Any) -> str:
    return str(context.task_result.id)


try:

    @task(
        occupy_key="storm:{key}",
        occupy_ttl=STORM_TTL,
        occupy_using=USING,
        backend="db",
        takes_context=True,
    )
    def storm(context: Any, key: int, item: int) -> int:
        """Record a run of ``item`` on ``key`` (retried while the key is held)."""
        _record("storm", item, f"storm:{key}", _result_id(context))
        return item

    @task(
        occupy_key="once:{key}",
        occupy_ttl=STORM_TTL,
        occupy_once=60,
        occupy_using=USING,
        backend="db",
        takes_context=True,
    )
    def once(context: Any, key: int) -> None:
        """Record a run on ``key``, enqueued once while one is queued or running."""
        _record("once", 0, f"once:{key}", _result_id(context))

except Exception:  # the database backend is not installed: the storm tests skip
    storm = once = None  # type: ignore[assignment]


# Spawned processes ---------------------------------------------------------------------


def _setup(names: dict[str, str]) -> None:
    """Set Django up in a spawned child, on the parent's PostgreSQL test database."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["OCCUPY_TEST_DB"] = "postgresql"
    import django

    django.setup()
    from django.db import connections as child

    for alias, name in names.items():
        child.settings[alias]["NAME"] = name


def _work(names: dict[str, str], worker_id: str) -> None:
    _setup(names)
    from django_tasks_db.management.commands.db_worker import Worker

    Worker(
        queue_names=["default"],
        interval=0.05,
        batch=False,
        backend_name="db",
        startup_delay=False,
        max_tasks=None,
        worker_id=worker_id,
        excluded_queue_names=[],
    ).run()


def _enqueue(names: dict[str, str], calls: list[tuple[str, dict[str, int]]], out: Any) -> None:
    _setup(names)
    from tests.support import djtasks

    ids = []
    for name, kwargs in calls:
        result = getattr(djtasks, name).enqueue(**kwargs)
        ids.append((kwargs.get("key"), str(result.id)))
        if name == "once":
            time.sleep(0.02)
    out.put(ids)


def names() -> dict[str, str]:
    """Return the database names the children use: every PostgreSQL alias on the test
    database of ``postgresql``."""
    name = connections["postgresql"].settings_dict["NAME"]
    return {"default": name, "postgresql": name}


def start_worker(worker_id: str) -> Any:
    """Start one django-tasks-db worker process on the storm's queue."""
    proc = _ctx.Process(target=_work, args=(names(), worker_id), daemon=True)
    proc.start()
    return proc


def start_enqueuer(calls: list[tuple[str, dict[str, int]]], out: Any) -> Any:
    """Start a process that enqueues ``calls`` (task name, keyword arguments) and puts the
    (key, result id) pairs it got on ``out``."""
    proc = _ctx.Process(target=_enqueue, args=(names(), calls, out), daemon=True)
    proc.start()
    return proc


def queue() -> Any:
    """Return a queue the enqueuer processes answer on."""
    return _ctx.Queue()
