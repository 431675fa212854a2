"""occupy.django_tasks on Django's tasks framework, in this process (the immediate backend runs a
task as it is enqueued): the lease on the formatted key, the busy modes, the fence after a
force release in the admin, bad options. The storm with worker processes killed is
tests/test_tasks_storm.py."""

from __future__ import annotations

import importlib.util
import io
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

import occupy
from occupy.models import Occupation
from occupy.owners import parse_task_owner, task_owner
from occupy.taskcore import once_key

if (
    importlib.util.find_spec("django.tasks") is None
    and importlib.util.find_spec("django_tasks") is None
):
    pytest.skip(
        "Django's tasks framework is not here (Django 5.2 without the django-tasks package: "
        "pip install 'django-occupy[tasks]')",
        allow_module_level=True,
    )

from occupy.django_tasks import OccupyTask, current_lease, task
from tests.testapp.models import Document

pytestmark = pytest.mark.usefixtures("live_db")
seen: list[tuple[str, int, str | None]] = []


@task(occupy_key="report:{account_id}", occupy_on_busy="skip", takes_context=True)
def report(context: Any, account_id: int) -> int:
    lease = current_lease()
    current = occupy.holder(lease.key)
    seen.append((lease.key, lease.fence, None if current is None else current.owner))
    return account_id


@task(occupy_key="report:{account_id}", occupy_on_busy="raise")
def strict_report(account_id: int) -> int:
    return account_id


def test_the_body_holds_the_formatted_key_under_the_task_owner() -> None:
    seen.clear()
    result = report.enqueue(account_id=7)
    assert result.return_value == 7
    [(key, fence, owner)] = seen
    assert key == "report:7" and fence > 0
    assert owner == task_owner(report.module_path, result.id)
    assert parse_task_owner(owner) is not None
    assert occupy.holder("report:7") is None  # released on return
    assert isinstance(report, OccupyTask)


def test_skip_returns_without_running_the_body() -> None:
    seen.clear()
    with occupy.lock("report:8", owner="someone", timeout=0):
        result = report.enqueue(8)
    assert seen == [] and result.return_value is None
    assert str(result.status) == "SUCCESSFUL"


def test_raise_fails_the_run_with_occupied() -> None:
    with occupy.lock("report:9", owner="someone", timeout=0):
        result = strict_report.enqueue(account_id=9)
    assert str(result.status) == "FAILED"
    assert result.errors[0].exception_class is occupy.Occupied
    assert strict_report.enqueue(account_id=9).return_value == 9  # free again


@task(occupy_key="testapp.document:{doc_id}", occupy_on_busy="raise")
def rewrite(doc_id: int, staff_pk: int) -> None:
    page = Document.objects.get(pk=doc_id)
    page.body = "by the task"
    page.save(lease=current_lease())
    # An operator force-releases the task's key in the admin; an editor takes it and saves.
    client = Client()
    client.force_login(User.objects.get(pk=staff_pk))
    claim = Occupation.objects.get(key=current_lease().key)
    client.post(
        "/admin/occupy/occupation/", {"action": "force_release", "_selected_action": [claim.pk]}
    )
    with occupy.lock(current_lease().key, owner="editor") as editor:
        assert editor.fence > current_lease().fence
        fresh = Document.objects.get(pk=doc_id)
        fresh.body = "by the editor"
        fresh.save(lease=editor)
    page.body = "by the task, late"
    page.save(lease=current_lease())  # refused: FencedOut fails the run


def test_a_force_release_in_the_admin_fences_the_running_task_out() -> None:
    staff = User.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    doc = Document.objects.create(body="")
    try:
        result = rewrite.enqueue(doc_id=doc.pk, staff_pk=staff.pk)
        assert str(result.status) == "FAILED"
        assert result.errors[0].exception_class is occupy.FencedOut
        assert Document.objects.get(pk=doc.pk).body == "by the editor"
    finally:
        User.objects.all().delete()


def body(account_id: int) -> None:
    """A task body for the option checks (tasks are module-level functions)."""


@task(occupy_key="listed:{n}", occupy_on_busy="skip")
def listed(n: int, staff_pk: int) -> list[str]:
    client = Client()
    client.force_login(User.objects.get(pk=staff_pk))
    page = client.get("/admin/occupy/occupation/").content.decode()
    out = io.StringIO()
    call_command("list_locks", "--backend", "default", stdout=out)
    return [page, out.getvalue()]


def test_list_locks_and_the_admin_show_the_running_task_and_its_result_id() -> None:
    staff = User.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    try:
        result = listed.enqueue(n=1, staff_pk=staff.pk)
    finally:
        User.objects.all().delete()
    page, listing = result.return_value
    assert f"{listed.module_path} ({result.id})" in page
    assert task_owner(listed.module_path, result.id) in listing
    assert "listed:1" in listing


def test_bad_options_are_refused_naming_the_problem() -> None:
    with pytest.raises(ValueError, match="has no parameter for"):
        task(occupy_key="report:{account}")(body)
    with pytest.raises(ValueError, match="occupy_on_busy must be one of"):
        task(occupy_key="report:{account_id}", occupy_on_busy="wait")(body)  # type: ignore[arg-type]
    # The immediate backend runs the task at once: nothing to re-enqueue for later.
    with pytest.raises(ValueError, match="does not support; use 'skip' or 'raise'"):
        task(occupy_key="report:{account_id}")(body)
    with pytest.raises(ValueError, match="ttl"):
        task(occupy_key="r", occupy_ttl=0, occupy_on_busy="skip")(body)
    with pytest.raises(ValueError, match="non-empty"):
        task(occupy_key="", occupy_on_busy="skip")(body)


def test_current_lease_outside_a_task_body_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="outside the body"):
        current_lease()


if settings.TASKS_DB:

    @task(occupy_key="digest:{user_id}", occupy_once=30, backend="db")
    def digest(user_id: int) -> int:
        return user_id


def _work_off_the_queue() -> None:
    from django_tasks_db.management.commands.db_worker import Worker

    Worker(
        queue_names=["default"],
        interval=0,
        batch=True,
        backend_name="db",
        startup_delay=False,
        max_tasks=None,
        worker_id="in-process",
        excluded_queue_names=[],
    ).run()


@pytest.mark.skipif(not settings.TASKS_DB, reason="django-tasks-db is not installed")
def test_enqueue_once_returns_the_queued_task_and_its_claim_is_bounded() -> None:
    from django_tasks_db.models import DBTaskResult

    first = digest.enqueue(user_id=3)
    again = digest.enqueue(3)
    assert again.id == first.id
    assert digest.enqueue(user_id=4).id != first.id  # another key
    claim = occupy.holder(once_key(digest.module_path, "digest:3"))
    assert claim is not None and claim.owner == task_owner(digest.module_path, first.id)
    assert claim.expires_at <= timezone.now() + timedelta(seconds=30)  # the queued bound
    _work_off_the_queue()  # runs both; each run ends its claim
    assert str(digest.get_result(first.id).status) == "SUCCESSFUL"
    assert occupy.holder(once_key(digest.module_path, "digest:3")) is None
    third = digest.enqueue(user_id=3)
    assert third.id != first.id
    # A claim whose task is gone (pruned) or finished stands for nothing: replaced.
    Occupation.objects.filter(
        key=once_key(digest.module_path, "digest:3")
    ).delete()  # as the admin's force release
    fourth = digest.enqueue(user_id=3)
    assert fourth.id != third.id
    _work_off_the_queue()
    DBTaskResult.objects.all().delete()


@pytest.mark.skipif(not settings.TASKS_DB, reason="django-tasks-db is not installed")
def test_a_busy_run_is_enqueued_again_after_the_holders_remaining_time() -> None:
    from django_tasks_db.models import DBTaskResult

    with occupy.lock("digest:5", owner="someone", ttl=30, timeout=0):
        first = digest.enqueue(user_id=5)
        _work_off_the_queue()
    assert digest.get_result(first.id).return_value is None  # did not run its body
    [later] = DBTaskResult.objects.exclude(id=first.id).filter(status="READY")
    assert later.args_kwargs == {"args": [], "kwargs": {"user_id": 5}}
    wait = (later.run_after - timezone.now()).total_seconds()
    assert 20 < wait <= 31  # the holder's remaining time, rounded up
    # The enqueue-once claim moved to the task that will run.
    claim = occupy.holder(once_key(digest.module_path, "digest:5"))
    assert claim is not None and claim.owner == task_owner(digest.module_path, later.id)
    assert str(digest.enqueue(user_id=5).id) == str(later.id)
    DBTaskResult.objects.all().delete()
