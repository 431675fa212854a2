"""A real ``celery worker`` of a startproject-style project refuses to start when one of
its tasks is refused as it is made (an ``occupy_key`` naming no parameter): it exits
non-zero with the ``ValueError`` naming the task and the template, rather than
starting without that task and the tasks of its module and discarding their messages.

Celery's Django fixup runs the system checks as the worker starts and drops what they
return; occupy's check (``occupy.E406``) must not make the tasks there, or the app is
left marked finalized with tasks unmade and the worker starts anyway."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from tests.support import celery_procs as cp

pytest.importorskip("celery")

SETTINGS = """
SECRET_KEY = "worker-start"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "occupy", "billing"]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{db}"}}}}
CELERY_BROKER_URL = "{broker}"
CELERY_TASK_DEFAULT_QUEUE = "{queue}"
"""

CELERY = """
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""

TASKS = """
from celery import shared_task

from occupy.celery import OccupyTask


@shared_task
def tick():
    return "tick"


@shared_task(base=OccupyTask, occupy_key="{key}")
def report(n):
    return n
"""


def _worker(tmp_path: Path, key: str) -> tuple[int | None, str]:
    """Start the worker of a ``startproject``-style project whose ``billing`` app has
    ``tick`` and a ``report`` task with the key template ``key``; return its exit
    status (``None``: it was ready, and was then stopped) and its log."""
    project = tmp_path / "project"
    broker = cp.RABBITMQ_URL if settings.RABBITMQ_UP else "memory://"
    queue = f"{cp.QUEUE_PREFIX}-start"
    files = {
        "proj/__init__.py": "from proj.celery import app as celery_app\n",
        "proj/settings.py": SETTINGS.format(broker=broker, queue=queue, db=project / "db.sqlite3"),
        "proj/celery.py": CELERY,
        "billing/__init__.py": "",
        "billing/tasks.py": TASKS.format(key=key),
    }
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    command = [
        sys.executable, "-m", "celery", "-A", "proj", "worker", "--pool=solo", "-Q", queue,
        "-n", f"start{settings.SUFFIX}@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info",
    ]  # fmt: skip
    environ = {
        **os.environ,
        "PYTHONPATH": f"{project}{os.pathsep}{cp.ROOT}",
        "DJANGO_SETTINGS_MODULE": "proj.settings",
    }
    log = tmp_path / "proc0.log"
    with cp.processes([command], environ, tmp_path) as (worker,):
        deadline = time.monotonic() + 60
        while worker.poll() is None and time.monotonic() < deadline:
            if " ready." in log.read_text():
                # Idle and on a queue of its own: nothing to lose, and its warm
                # shutdown takes seconds.
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=15)
                return None, log.read_text()
            time.sleep(0.1)
        assert worker.poll() is not None, (
            f"the worker neither started nor exited:\n{log.read_text()}"
        )
        return worker.returncode, log.read_text()


def test_a_worker_with_a_task_refused_when_made_exits_naming_it(tmp_path: Path) -> None:
    status, log = _worker(tmp_path, "report:{account_id}")
    assert status not in (None, 0), log
    assert "ValueError: task billing.tasks.report: the key template" in log, log
    assert "'report:{account_id}' names ['account_id']" in log, log
    assert " ready." not in log, log


def test_a_worker_with_good_tasks_starts_with_all_of_them(tmp_path: Path) -> None:
    status, log = _worker(tmp_path, "report:{n}")
    assert status is None, log
    assert "billing.tasks.tick" in log and "billing.tasks.report" in log, log
