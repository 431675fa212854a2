"""The storm's processes: django-tasks-db's own worker, and enqueuers, spawned on the
PostgreSQL test database. This module imports no task at its top: a spawned child imports
it before Django is set up (the tasks are in tests/support/djtasks.py)."""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

from django.db import connections

_ctx = multiprocessing.get_context("spawn")


def _setup(names: dict[str, str]) -> None:
    """Set Django up in a spawned child, on the parent's PostgreSQL test database."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    os.environ["OCCUPY_TEST_DB"] = "postgresql"
    import django

    django.setup()
    from django.db import connections as child

    for alias, name in names.items():
        child.settings[alias]["NAME"] = name
    if child["default"].vendor != "postgresql":  # settings imported before the switch
        raise RuntimeError("the storm's processes must run on PostgreSQL")


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
