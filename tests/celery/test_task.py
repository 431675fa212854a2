"""OccupyTask in one process: its options, the busy choices, ``self.lease``, the owner
``list_locks`` and the admin show, a force release fencing the run out, and enqueue-once
on Celery's in-memory broker. The storms on real workers are in test_storm.py."""

from __future__ import annotations

import io
import logging
import threading
import time
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

import occupy
from occupy.owners import celery_task_owner, parse_task_owner

celery = pytest.importorskip("celery")

from occupy.celery import OccupyTask  # noqa: E402
from occupy.models import Occupation  # noqa: E402
from occupy.taskcore import ONCE_TTL, once_key  # noqa: E402
from tests.testapp.models import Document  # noqa: E402


@pytest.fixture
def app() -> Any:
    """A Celery app on the in-memory broker (nothing is consumed: sends are inspected)."""
    app = celery.Celery("occupy_task_tests", broker="memory://", set_as_current=False)
    app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=False)
    app.finalize()  # tasks are made as they are declared (a worker finalizes at start)
    return app


def test_owner_names_the_task_and_reads_back() -> None:
    owner = celery_task_owner("reports.build:v2", "1b4e28ba-2fa1-11d2-883f-0016d3cca427")
    assert owner == "celery:reports.build:v2:1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    parsed = parse_task_owner(owner)
    assert parsed is not None
    assert (parsed.runner, parsed.name, parsed.task_id) == (
        "celery",
        "reports.build:v2",
        "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    )
    assert parse_task_owner("user:7") is None
    with pytest.raises(ValueError, match="without ':'"):
        celery_task_owner("t", "a:b")


def test_bad_options_fail_when_the_task_is_made(app: Any) -> None:
    with pytest.raises(ValueError, match="occupy_on_busy must be one of"):

        @app.task(shared=False, base=OccupyTask, occupy_key="k", occupy_on_busy="wait")
        def busy() -> None: ...

    with pytest.raises(ValueError, match=r"names \['account'\]"):

        @app.task(shared=False, base=OccupyTask, occupy_key="report:{account}")
        def report(account_id: int) -> None: ...

    with pytest.raises(ValueError, match="occupy_once needs an occupy_key"):

        @app.task(shared=False, base=OccupyTask, occupy_once=True)
        def once() -> None: ...

    with pytest.raises(ValueError, match="ttl"):

        @app.task(shared=False, base=OccupyTask, occupy_key="k", occupy_ttl=0)
        def short() -> None: ...


def test_the_body_holds_the_formatted_key_named_for_the_task(app: Any, live_db: None) -> None:
    seen: dict[str, Any] = {}

    @app.task(
        shared=False, bind=True, base=OccupyTask, occupy_key="report:{account_id}", occupy_ttl=30
    )
    def report(self: Any, account_id: int, period: str = "day") -> None:
        seen["lease"] = self.lease
        seen["holder"] = occupy.holder(f"report:{account_id}")
        out = io.StringIO()
        call_command("list_locks", stdout=out)
        seen["list_locks"] = out.getvalue()

    result = report.apply(args=(7,), task_id="tid-1")
    assert result.successful(), result.traceback
    lease = seen["lease"]
    assert lease.key == "report:7" and lease.renew
    assert seen["holder"].owner == celery_task_owner(report.name, "tid-1")
    assert f"celery:{report.name}:tid-1" in seen["list_locks"]
    assert occupy.holder("report:7") is None  # released at the end
    assert report.lease is None


def _held_elsewhere(key: str) -> Any:
    return occupy.acquire(key, owner="someone-else", ttl=30, reentrant=False)


def test_busy_skip_logs_and_does_not_run(
    app: Any, live_db: None, caplog: pytest.LogCaptureFixture
) -> None:
    ran = []

    @app.task(shared=False, base=OccupyTask, occupy_key="sync:{user}", occupy_on_busy="skip")
    def sync(user: int) -> None:
        ran.append(user)

    other = _held_elsewhere("sync:1")
    with caplog.at_level(logging.INFO, logger="occupy.tasks"):
        assert sync.apply(args=(1,)).successful()
    assert ran == []
    assert "skipped" in caplog.text and "someone-else" in caplog.text
    occupy.release(other)
    sync.apply(args=(1,))
    assert ran == [1]


def test_busy_raise_fails_with_occupied(app: Any, live_db: None) -> None:
    @app.task(shared=False, base=OccupyTask, occupy_key="sync:{user}", occupy_on_busy="raise")
    def sync(user: int) -> None:
        raise AssertionError("must not run")

    other = _held_elsewhere("sync:2")
    result = sync.apply(args=(2,))
    assert result.failed() and isinstance(result.result, occupy.Occupied)
    with pytest.raises(occupy.Occupied):
        sync(2)  # called directly: the same
    occupy.release(other)


def test_busy_retry_on_a_worker_retries_after_the_holders_time(app: Any, live_db: None) -> None:
    @app.task(shared=False, bind=True, base=OccupyTask, occupy_key="sync:{user}", occupy_ttl=5)
    def sync(self: Any, user: int) -> None:
        raise AssertionError("must not run")

    other = _held_elsewhere("sync:3")
    retried: dict[str, Any] = {}

    def retry(**kwargs: Any) -> Exception:
        retried.update(kwargs)
        return celery.exceptions.Retry()

    sync.retry = retry  # what a worker's request would call
    sync.push_request(id="tid-3", called_directly=False, retries=0, args=(3,), kwargs={})
    try:
        with pytest.raises(celery.exceptions.Retry):
            sync.__call__(3)
    finally:
        sync.pop_request()
    assert 28 <= retried["countdown"] <= 30  # what the holder has left of its 30 s
    assert isinstance(retried["exc"], occupy.Occupied)
    assert retried["max_retries"] == 1  # not counted against the task's own max_retries
    occupy.release(other)


def test_busy_retry_in_eager_mode_waits_for_the_key(app: Any, live_db: None) -> None:
    ran = []

    @app.task(shared=False, base=OccupyTask, occupy_key="sync:{user}")
    def sync(user: int) -> None:
        ran.append(time.monotonic())

    other = _held_elsewhere("sync:4")
    released = time.monotonic()

    def release_soon() -> None:
        nonlocal released
        time.sleep(0.3)
        released = time.monotonic()
        occupy.release(other)

    thread = threading.Thread(target=release_soon)
    thread.start()
    assert sync.apply(args=(4,)).successful()
    thread.join()
    assert len(ran) == 1 and ran[0] >= released


def test_force_release_in_the_admin_fences_the_run_out(app: Any, live_db: None) -> None:
    staff = User.objects.create_user("ops", password="pw", is_staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_occupation", "force_release_occupation"])
    )
    doc = Document.objects.create(body="v0")
    outcome: dict[str, Any] = {}

    @app.task(
        shared=False, bind=True, base=OccupyTask, occupy_key="testapp.document:{pk}", occupy_ttl=30
    )
    def rewrite(self: Any, pk: int, body: str, stuck: bool) -> None:
        if stuck:  # an operator force-releases this run, and a new run writes
            client = Client()
            client.force_login(staff)
            claim = Occupation.objects.get(key=f"testapp.document:{pk}")
            assert claim.owner == celery_task_owner(self.name, self.request.id)
            client.post(
                "/admin/occupy/occupation/",
                {"action": "force_release", "_selected_action": [claim.pk]},
            )
            assert rewrite.apply(args=(pk, "new", False)).successful()
        document = Document.objects.get(pk=pk)
        document.body = body
        try:
            document.save(lease=self.lease)
        except occupy.FencedOut:
            outcome["fenced_out"] = True
            raise

    result = rewrite.apply(args=(doc.pk, "old", True))
    assert outcome == {"fenced_out": True}
    assert result.failed() and isinstance(result.result, occupy.FencedOut)
    doc.refresh_from_db()
    assert doc.body == "new"
    Document.objects.all().delete()
    User.objects.all().delete()


def test_once_returns_the_queued_task_and_lets_its_retry_through(app: Any, live_db: None) -> None:
    @app.task(shared=False, base=OccupyTask, occupy_key="report:{account_id}", occupy_once=True)
    def report(account_id: int) -> None: ...

    first = report.delay(1)
    assert report.delay(1).id == first.id
    assert report.apply_async(kwargs={"account_id": 1}).id == first.id
    other = report.delay(2)
    assert other.id != first.id
    claim = occupy.holder(once_key(report.name, "report:1"))
    assert claim is not None and claim.owner == celery_task_owner(report.name, first.id)
    # The same task sent again (a retry, which keeps its id) is sent.
    assert report.apply_async((1,), task_id=first.id).id == first.id
    # A queued task's claim is bounded by occupy_once (True: ONCE_TTL, an hour).
    left = (claim.expires_at - timezone.now()).total_seconds()
    assert ONCE_TTL - 10 < left <= ONCE_TTL


def test_once_claim_is_taken_over_by_the_run_and_released_at_its_end(
    app: Any, live_db: None
) -> None:
    seen = {}

    @app.task(
        shared=False, bind=True, base=OccupyTask, occupy_key="report:{account_id}", occupy_once=True
    )
    def report(self: Any, account_id: int) -> None:
        seen["claim"] = occupy.holder(once_key(report.name, f"report:{account_id}"))
        seen["again"] = report.delay(account_id).id

    queued = report.delay(5)
    assert report.apply(args=(5,), task_id=queued.id).successful()
    assert seen["claim"].owner == celery_task_owner(report.name, queued.id)
    assert seen["again"] == queued.id  # while running: deduplicated
    assert occupy.holder(once_key(report.name, "report:5")) is None  # released at the end
    assert report.delay(5).id != queued.id


def test_once_claim_stays_while_the_body_retries_itself(app: Any, live_db: None) -> None:
    @app.task(shared=False, bind=True, base=OccupyTask, occupy_key="mail:{to}", occupy_once=True)
    def mail(self: Any, to: str) -> None:
        raise self.retry(countdown=30)

    mail.retry = lambda **kwargs: celery.exceptions.Retry()  # what a worker would send
    queued = mail.delay("ann")
    mail.push_request(id=queued.id, called_directly=False, retries=0, args=("ann",), kwargs={})
    try:
        with pytest.raises(celery.exceptions.Retry):
            mail.__call__("ann")
    finally:
        mail.pop_request()
    claim = occupy.holder(once_key(mail.name, "mail:ann"))
    assert claim is not None and claim.owner == celery_task_owner(mail.name, queued.id)
    assert (claim.expires_at - timezone.now()).total_seconds() > ONCE_TTL - 10  # occupy_once
    assert occupy.holder("mail:ann") is None  # the run lease ended
    assert mail.delay("ann").id == queued.id  # still deduplicated while it waits
