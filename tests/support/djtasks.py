"""Tasks of Django's tasks framework for occupy.django_tasks' tests, each storm run
recording its start and end in PostgreSQL (table :data:`RUNS`); the worker processes are
in djtasks_workers.py."""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import connections

from occupy.django_tasks import current_lease, task

#: Where each run of a storm task records itself (made by the test, on PostgreSQL).
RUNS = "occupy_djtasks_runs"
#: The occupy backend the storm's leases live on: the PostgreSQL test database, the same
#: alias in the test process and in the workers.
ALIAS = "db-postgresql"
#: The storm's lease ttl (seconds): a killed worker's key must be free within it + 1 s.
STORM_TTL = 2.0
#: How long each storm run's body lasts (seconds).
BODY = 0.6

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


@task(
    occupy_key="storm:{key}",
    occupy_ttl=STORM_TTL,
    occupy_backend=ALIAS,
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
    occupy_backend=ALIAS,
    backend="db",
    takes_context=True,
)
def once(context: Any, key: int) -> None:
    """Record a run on ``key``, enqueued once while one is queued or running."""
    _record("once", 0, f"once:{key}", _result_id(context))
