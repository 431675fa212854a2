"""The one task core under both integrations (occupy.taskcore): one rule for the
enqueue-once key, claims per task and key, the same errors for a key template that does
not fit a call, and the system checks of the tasks' options (occupy.E401-E406)."""

from __future__ import annotations

import gc
import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import checks

import occupy
from occupy.keys import fit
from occupy.owners import celery_task_owner
from occupy.taskcore import checks as task_checks
from occupy.taskcore import once_key
from occupy.validation import MAX_KEY_LENGTH, check_key

HAS_FRAMEWORK = (
    importlib.util.find_spec("django.tasks") is not None
    or importlib.util.find_spec("django_tasks") is not None
)


@pytest.fixture
def celery_app() -> Any:
    """A Celery app on the in-memory broker (nothing is consumed: sends are inspected)."""
    celery = pytest.importorskip("celery")
    app = celery.Celery("occupy_core_tests", broker="memory://", set_as_current=False)
    app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=False)
    app.finalize()
    return app


@pytest.fixture
def declared() -> Iterator[None]:
    """Forget, after the test, the tasks it declared (the checks would report them)."""
    before = list(task_checks._declared)
    yield
    task_checks._declared[:] = before
    gc.collect()


def body(account_id: int, thing: Any = None) -> None:
    """A task body for the Django tasks framework (tasks are module-level functions)."""


# The enqueue-once key ----------------------------------------------------------------


@pytest.mark.parametrize("task", ["t", "billing.tasks.build_report", "x" * 300])
@pytest.mark.parametrize("length", [1, 200, MAX_KEY_LENGTH - 5, MAX_KEY_LENGTH])
def test_every_valid_run_key_has_a_valid_once_key_of_its_task(task: str, length: int) -> None:
    run_key = "k" * length
    key = once_key(task, run_key)
    assert check_key(key) == key and len(key) <= MAX_KEY_LENGTH
    assert key.startswith("once:")
    assert once_key(task + "2", run_key) != key  # per task
    assert once_key(task, run_key[:-1] + "j") != key  # per key


def test_a_short_once_key_reads_as_task_and_key() -> None:
    assert once_key("billing.build", "report:7") == "once:billing.build:report:7"
    assert once_key("a" * 250, "k") == fit("once:", "a" * 250 + ":k")


# The same errors --------------------------------------------------------------------


def test_a_celery_key_template_that_does_not_fit_a_call_names_task_and_template(
    celery_app: Any, live_db: None
) -> None:
    from occupy.celery import OccupyTask

    @celery_app.task(shared=False, base=OccupyTask, occupy_key="report:{account.pk}")
    def report(account: Any) -> None: ...

    with pytest.raises(ValueError, match=r"report:\{account\.pk\}") as raised:
        report.apply(args=(7,), throw=True)
    assert report.name in str(raised.value) and "AttributeError" in str(raised.value)
    with pytest.raises(ValueError, match=r"task .*report.*'report:\{account\.pk\}'"):
        report.apply(throw=True)  # a missing argument
    with pytest.raises(ValueError, match=r"names \['acount'\], which task .* has no parameter"):

        @celery_app.task(shared=False, base=OccupyTask, occupy_key="report:{acount}")
        def typo(account: Any) -> None: ...


@pytest.mark.skipif(not HAS_FRAMEWORK, reason="Django's tasks framework is not installed")
def test_a_django_task_key_template_that_does_not_fit_a_call_names_task_and_template(
    live_db: None, declared: None
) -> None:
    from occupy.django_tasks import task

    report = task(occupy_key="report:{thing.pk}", occupy_on_busy="skip")(body)
    result = report.enqueue(7)
    assert str(result.status) == "FAILED"
    assert result.errors[0].exception_class is ValueError
    assert report.module_path in result.errors[0].traceback
    assert "'report:{thing.pk}'" in result.errors[0].traceback
    with pytest.raises(ValueError, match=r"names \['acount'\], which task .* has no parameter"):
        task(occupy_key="report:{acount}", occupy_on_busy="skip")(body)


def test_a_lock_decorator_template_that_does_not_fit_a_call_names_function_and_template(
    live_db: None,
) -> None:
    @occupy.lock("report:{account.pk}")
    def report(account: Any) -> None: ...

    with pytest.raises(ValueError, match=r"report\(\).*'report:\{account\.pk\}'"):
        report(7)


# Enqueue-once per task and key (issue 30, item 17) ---------------------------------


def test_two_celery_tasks_with_one_key_template_each_enqueue_once_for_themselves(
    celery_app: Any, live_db: None
) -> None:
    from occupy.celery import OccupyTask

    @celery_app.task(shared=False, base=OccupyTask, occupy_key="shared:{x}", occupy_once=True)
    def a(x: int) -> str:
        return "a"

    @celery_app.task(shared=False, base=OccupyTask, occupy_key="shared:{x}", occupy_once=True)
    def b(x: int) -> str:
        return "b"

    first_a = a.delay(7)
    first_b = b.delay(7)
    assert first_b.id != first_a.id  # b is sent: a's claim is not b's
    assert a.delay(7).id == first_a.id and b.delay(7).id == first_b.id  # each once
    holders = {occupy.holder(once_key(t.name, "shared:7")).owner for t in (a, b)}
    assert holders == {celery_task_owner(a.name, first_a.id), celery_task_owner(b.name, first_b.id)}


# The checks of the tasks' options ----------------------------------------------------


def _task_errors() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for message in checks.run_checks():
        if message.id and message.id.startswith("occupy.E40"):
            found.setdefault(message.id, []).append(f"{message.msg} | {message.hint}")
    return found


def test_check_reports_a_celery_tasks_bad_backend_ttl_and_on_busy(
    celery_app: Any, declared: None
) -> None:
    from occupy.celery import OccupyTask

    @celery_app.task(shared=False, base=OccupyTask, occupy_key="k:{x}", occupy_backend="nope")
    def elsewhere(x: int) -> None: ...

    @celery_app.task(shared=False, base=OccupyTask, occupy_key="k:{x}")
    def annotated(x: int) -> None: ...

    # Celery's task_annotations set options after the task was made.
    type(annotated).occupy_ttl = 0
    type(annotated).occupy_on_busy = "wait"
    type(annotated).occupy_once = -1
    found = _task_errors()
    [e401] = found["occupy.E401"]
    assert elsewhere.name in e401 and "'nope'" in e401 and "configured" in e401
    assert annotated.name in found["occupy.E402"][0] and "positive" in found["occupy.E402"][0]
    assert "'wait'" in found["occupy.E403"][0]
    assert annotated.name in found["occupy.E404"][0]
    with pytest.raises(ValueError, match="occupy_ttl must be positive"):
        annotated.delay(1)  # and using it says the same


def test_check_makes_the_tasks_of_the_projects_celery_app_as_a_worker_does(
    declared: None,
) -> None:
    """Celery makes a task only when its app is finalized, which a worker does at start:
    ``check`` finalizes the project's app (the current one) first, so that a task
    refused when it is made is ``occupy.E406`` and a task's unconfigured backend
    ``occupy.E401``, instead of a clean ``check`` and a worker that dies or fails."""
    celery = pytest.importorskip("celery")
    from occupy.celery import OccupyTask

    previous = celery.current_app._get_current_object()
    try:
        misrouted = celery.Celery("occupy_misrouted", broker="memory://")  # made current

        @misrouted.task(shared=False, base=OccupyTask, occupy_key="k:{x}", occupy_backend="nope")
        def elsewhere(x: int) -> None: ...

        [e401] = _task_errors()["occupy.E401"]
        assert "occupy_misrouted" not in e401 and "elsewhere's occupy_backend is 'nope'" in e401

        broken = celery.Celery("occupy_broken", broker="memory://")

        @broken.task(shared=False, base=OccupyTask, occupy_key="x:{missing}")
        def misnamed(n: int) -> None: ...

        # In a worker that is starting (its loader's init_worker() ran, then the Django
        # fixup runs the checks) the app is left to the worker, which finalizes it and
        # exits with the error (tests/celery/test_worker_start.py).
        broken.loader.worker_initialized = True
        assert "occupy.E406" not in _task_errors() and not broken.finalized
        broken.loader.worker_initialized = False
        [e406] = _task_errors()["occupy.E406"]
        assert "Celery app 'occupy_broken' raised ValueError" in e406
        assert "'x:{missing}' names ['missing']" in e406
    finally:
        previous.set_current()


@pytest.mark.skipif(not HAS_FRAMEWORK, reason="Django's tasks framework is not installed")
def test_check_reports_a_django_tasks_backend_that_is_not_configured(declared: None) -> None:
    from occupy.django_tasks import task

    report = task(occupy_key="k:{account_id}", occupy_on_busy="skip", occupy_backend="nope")(body)
    [e401] = _task_errors()["occupy.E401"]
    assert report.module_path in e401 and "'nope'" in e401
    assert "Set occupy_backend to the alias of a configured backend" in e401
