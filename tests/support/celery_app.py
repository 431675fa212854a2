"""The Celery app of the storm and beat tests: real workers and beat processes load it.

Configured by environment variables the test sets for the processes it starts:
``OCCUPY_TEST_CELERY_BROKER`` (the broker URL), ``OCCUPY_TEST_CELERY_QUEUE`` (the queue,
carrying the checkout's suffix), ``OCCUPY_TEST_CELERY_DBNAMES`` (JSON: the test database
name of each alias, as tests/support/multiproc.py passes them), ``OCCUPY_TEST_CELERY_LOCKS``
(the occupy backend alias of the locks) and ``OCCUPY_TEST_CELERY_TTL``.

Every run of a task records its start and end in the ``celery_runs`` table of the
PostgreSQL test database (the database's clock, so intervals of different processes
compare), and makes one fenced write to ``celery_resource``: the write is refused when a
later grant of the key has been issued.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
import django

django.setup()

from celery import Celery  # noqa: E402
from celery.signals import worker_process_init  # noqa: E402
from django.db import connections  # noqa: E402

from occupy.celery import OccupyTask  # noqa: E402
from occupy.celery.beat import OccupyScheduler  # noqa: E402

for _alias, _name in json.loads(os.environ.get("OCCUPY_TEST_CELERY_DBNAMES", "{}")).items():
    connections.settings[_alias]["NAME"] = _name

QUEUE = os.environ.get("OCCUPY_TEST_CELERY_QUEUE", "occupy-tests")
LOCKS = os.environ.get("OCCUPY_TEST_CELERY_LOCKS", "default")
TTL = float(os.environ.get("OCCUPY_TEST_CELERY_TTL", "2"))
#: How long a storm task's body runs.
BODY = float(os.environ.get("OCCUPY_TEST_CELERY_BODY", "0.8"))
RECORDS = "postgresql"

app = Celery("occupy_tests", broker=os.environ.get("OCCUPY_TEST_CELERY_BROKER"))
app.conf.update(
    task_default_queue=QUEUE,
    task_default_exchange=QUEUE,
    task_default_routing_key=QUEUE,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_enable_remote_control=False,
    worker_send_task_events=False,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    # On Redis as broker, a message unacknowledged this long is delivered again.
    broker_transport_options={"visibility_timeout": 60},
    beat_schedule={"tick": {"task": "tests.support.celery_app.tick", "schedule": 1.0}},
    beat_max_loop_interval=1,
    occupy_beat_key=f"celery-beat:{QUEUE}",
    occupy_beat_ttl=TTL,
    occupy_beat_backend=LOCKS,
)


@worker_process_init.connect
def _fresh_connections(**kwargs: Any) -> None:
    """A forked pool process opens connections of its own."""
    for conn in connections.all(initialized_only=True):
        conn.close()


def _sql(sql: str, params: list[Any]) -> Any:
    with connections[RECORDS].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() if cursor.description else cursor.rowcount


@app.task(
    bind=True,
    base=OccupyTask,
    name="tests.support.celery_app.storm",
    occupy_key="storm:{key}",
    occupy_ttl=TTL,
    occupy_backend=LOCKS,
)
def storm(self: OccupyTask, key: str, number: int) -> None:
    """Record the run's start, work ``BODY`` seconds, write fenced, record the end."""
    lease = self.lease
    assert lease is not None
    (row,) = _sql(
        "INSERT INTO celery_runs (task_id, key, number, pid, fence, started) "
        "VALUES (%s, %s, %s, %s, %s, clock_timestamp()) RETURNING id",
        [self.request.id, key, number, os.getpid(), lease.fence],
    )
    time.sleep(BODY)
    written = _sql(
        "UPDATE celery_resource SET fence = %s, writes = writes + 1 WHERE key = %s AND fence <= %s",
        [lease.fence, key, lease.fence],
    )
    _sql(
        "UPDATE celery_runs SET ended = clock_timestamp(), fenced_ok = %s WHERE id = %s",
        [written == 1, row],
    )


@app.task(
    bind=True,
    base=OccupyTask,
    name="tests.support.celery_app.once",
    occupy_key="once:{key}",
    occupy_ttl=TTL,
    occupy_once=True,
    occupy_backend=LOCKS,
)
def once(self: OccupyTask, key: str) -> None:
    """Record one run of the enqueue-once task."""
    _sql(
        "INSERT INTO celery_runs (task_id, key, number, pid, fence, started) "
        "VALUES (%s, %s, 0, %s, %s, clock_timestamp())",
        [self.request.id, key, os.getpid(), self.lease.fence if self.lease else 0],
    )
    time.sleep(BODY)


@app.task(name="tests.support.celery_app.tick")
def tick() -> None:
    """What beat sends (the beat test records the sends, not the runs)."""


class RecordingMixin:
    """Record each send of a scheduler (pid, fence, database time), then send."""

    occupy_lease: Any

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kw: Any) -> Any:
        """Record the send, then send."""
        lease = self.occupy_lease
        _sql(
            "INSERT INTO celery_runs (task_id, key, number, pid, fence, started) "
            "VALUES ('beat', %s, 0, %s, %s, clock_timestamp())",
            [entry.name, os.getpid(), lease.fence if lease else -1],
        )
        return super().apply_async(entry, producer, advance, **kw)  # type: ignore[misc]


class RecordingScheduler(RecordingMixin, OccupyScheduler):
    """OccupyScheduler recording its sends."""


if importlib.util.find_spec("django_celery_beat") is not None:
    from occupy.celery.beat import OccupyDatabaseScheduler

    class RecordingDatabaseScheduler(RecordingMixin, OccupyDatabaseScheduler):  # type: ignore[valid-type,misc]
        """OccupyDatabaseScheduler (django-celery-beat) recording its sends."""


def enqueue(kind: str, keys: list[str], rounds: int) -> list[str]:
    """Send ``rounds`` tasks for each key; return their ids in order."""
    ids = []
    for number in range(rounds):
        for key in keys:
            if kind == "storm":
                ids.append(storm.delay(key, number).id)
            else:
                ids.append(once.delay(key).id)
    return ids


def wait_for_start() -> None:
    """Sleep until ``OCCUPY_TEST_CELERY_AT`` (epoch seconds), if set: processes started one
    after another under load send their burst together."""
    at = os.environ.get("OCCUPY_TEST_CELERY_AT")
    if at:
        time.sleep(max(0.0, float(at) - time.time()))


if __name__ == "__main__":
    # python -m tests.support.celery_app KIND ROUNDS KEY...: prints the sent ids as JSON.
    wait_for_start()
    print(json.dumps(enqueue(sys.argv[1], sys.argv[3:], int(sys.argv[2]))))
