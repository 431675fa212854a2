"""The Celery app of ``python -m bench tasks``: one task per contender, each recording its
runs like the storm tests' (tests/support/celery_app.py, whose app and tables it uses).

- ``occupy``: :class:`occupy.celery.OccupyTask` with ``occupy_once=True``;
- ``celery_once``: celery-once's ``QueueOnce`` (``graceful``: a refused enqueue returns
  a rejected result), its Redis backend;
- ``celery_singleton``: celery-singleton's ``Singleton``, its Redis backend.

The peers are bench-only installs (``pip install celery-once celery-singleton``); a
contender whose package is missing is not defined (the bench says it skipped it).
``OCCUPY_BENCH_ACKS=late`` sets ``task_acks_late`` and ``task_reject_on_worker_lost`` (the
recommended settings); else Celery's defaults (early acks) apply.
"""

from __future__ import annotations

import importlib.util
import os
import time
from typing import Any

from occupy.celery import OccupyTask
from tests.support import celery_app as base
from tests.support.celery_app import _sql, app

BODY = float(os.environ.get("OCCUPY_TEST_CELERY_BODY", "3"))
BROKER = os.environ.get("OCCUPY_TEST_CELERY_BROKER", "")
late = os.environ.get("OCCUPY_BENCH_ACKS") == "late"
#: ``OCCUPY_BENCH_VISIBILITY``: a Redis visibility timeout (seconds) shorter than the
#: task, swept for every second, so that a running task is delivered again.
visibility = os.environ.get("OCCUPY_BENCH_VISIBILITY")
if visibility:
    app.conf.broker_transport_options = {
        "visibility_timeout": float(visibility),
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
app.conf.update(
    task_acks_late=late,
    task_reject_on_worker_lost=late,
    ONCE={"backend": "celery_once.backends.Redis", "settings": {"url": BROKER}},
    singleton_backend_url=BROKER,
)

#: The task of each contender, by name.
TASKS: dict[str, Any] = {}


def _record(task_id: str, key: str) -> None:
    (row,) = _sql(
        "INSERT INTO celery_runs (task_id, key, number, pid, fence, started) "
        "VALUES (%s, %s, 0, %s, 0, clock_timestamp()) RETURNING id",
        [task_id, key, os.getpid()],
    )
    time.sleep(BODY)
    _sql("UPDATE celery_runs SET ended = clock_timestamp() WHERE id = %s", [row])


@app.task(
    bind=True,
    base=OccupyTask,
    name="bench.occupy",
    occupy_key="bench:{key}",
    occupy_ttl=base.TTL,
    occupy_once=True,
    occupy_backend=base.LOCKS,
)
def occupy_task(self: Any, key: str) -> None:
    """occupy's contender."""
    _record(self.request.id, key)


TASKS["occupy"] = occupy_task

if importlib.util.find_spec("celery_once") is not None:
    from celery_once import QueueOnce

    @app.task(
        bind=True,
        base=QueueOnce,
        name="bench.celery_once",
        once={"graceful": True, "keys": ["key"]},
    )
    def once_task(self: Any, key: str) -> None:
        """celery-once's contender."""
        _record(self.request.id, key)

    TASKS["celery-once"] = once_task

if importlib.util.find_spec("celery_singleton") is not None:
    from celery_singleton import Singleton

    @app.task(bind=True, base=Singleton, name="bench.celery_singleton", unique_on=["key"])
    def singleton_task(self: Any, key: str) -> None:
        """celery-singleton's contender."""
        _record(self.request.id, key)

    TASKS["celery-singleton"] = singleton_task


def send(contender: str, key: str) -> str | None:
    """Enqueue ``contender``'s task for ``key``; return the id it answered (``None``:
    refused)."""
    result = TASKS[contender].delay(key)
    return None if result is None or result.id is None else str(result.id)


if __name__ == "__main__":
    # python -m bench.celery_app CONTENDER ROUNDS KEY...: prints the answered ids as JSON.
    import json
    import sys

    contender, rounds, keys = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    base.wait_for_start()
    print(json.dumps([send(contender, key) for _ in range(rounds) for key in keys]))
