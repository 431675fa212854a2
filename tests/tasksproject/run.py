"""Run occupy.django_tasks in a user's project (settings.py), with the test suite's
django-tasks-db hidden (and, on Django 6, django-stubs-ext, whose monkeypatch makes
Django's Task subscriptable: only the backport, on Django 5.2, needs it):
``python run.py check`` runs ``manage.py check``; ``python run.py`` the scenarios,
printing ``ok <name>``."""

from __future__ import annotations

import importlib.util
import os
import sys
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]
from tests.support.import_probe import Hide  # noqa: E402

_DJANGO_6 = importlib.util.find_spec("django.tasks") is not None
sys.meta_path.insert(0, Hide(["django_tasks_db", *(["django_stubs_ext"] if _DJANGO_6 else [])]))
os.environ["DJANGO_SETTINGS_MODULE"] = "settings"

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

import occupy  # noqa: E402
from occupy.owners import task_owner  # noqa: E402
from occupy.taskcore import once_key  # noqa: E402


def scenarios() -> None:
    from django.conf import settings

    base = __import__(f"{settings.FRAMEWORK}.base", fromlist=["Task"])
    if settings.FRAMEWORK == "django.tasks":  # nothing made Django's Task generic
        assert "__class_getitem__" not in vars(base.Task), "Django's Task was patched"
    call_command("migrate", verbosity=0)
    from shop import tasks

    result = tasks.report.enqueue(account_id=7)
    [(key, fence, owner)] = tasks.seen
    assert result.return_value == 7 and key == "report:7" and fence > 0
    assert owner == task_owner(tasks.report.module_path, result.id)
    assert occupy.holder("report:7") is None
    print("ok the body holds the formatted key under the task's owner")

    with occupy.lock("report:8", owner="someone", timeout=0):
        skipped = tasks.report.enqueue(8)
        failed = tasks.strict_report.enqueue(account_id=8)
    assert len(tasks.seen) == 1 and skipped.return_value is None
    assert str(failed.status) == "FAILED" and failed.errors[0].exception_class is occupy.Occupied
    print("ok a busy run skips or raises")

    queue = tasks.digest.get_backend()
    first = tasks.digest.enqueue(user_id=3)
    assert tasks.digest.enqueue(3).id == first.id
    other = tasks.other_digest.enqueue(user_id=3)
    assert other.id != first.id, "another task's claim on the same key answered"
    claim = occupy.holder(once_key(tasks.digest.module_path, "digest:3"))
    assert claim is not None and claim.owner == task_owner(tasks.digest.module_path, first.id)
    assert claim.expires_at <= timezone.now() + timedelta(seconds=30)
    assert queue.work() == 2
    assert tasks.digest.get_result(first.id).return_value == 3
    assert occupy.holder(once_key(tasks.digest.module_path, "digest:3")) is None
    assert tasks.digest.enqueue(user_id=3).id != first.id
    print("ok enqueue-once per task and key, its claim bounded and ended by the run")

    queue.clear()
    with occupy.lock("digest:5", owner="someone", ttl=30, timeout=0):
        busy = tasks.digest.enqueue(user_id=5)
        queue.work()
    assert tasks.digest.get_result(busy.id).return_value is None
    [later] = [r for r in queue.results if str(r.status) == "READY"]
    wait = (later.task.run_after - timezone.now()).total_seconds()
    assert 20 < wait <= 31, wait
    claim = occupy.holder(once_key(tasks.digest.module_path, "digest:5"))
    assert claim is not None and claim.owner == task_owner(tasks.digest.module_path, later.id)
    assert tasks.digest.enqueue(user_id=5).id == later.id
    print("ok a busy run is enqueued again after the holder's time, with its claim")


if __name__ == "__main__":
    if sys.argv[1:] == ["check"]:
        call_command("check")
    else:
        scenarios()
