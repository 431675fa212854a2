"""occupy's beat scheduler refuses at start a setting of its lease that it cannot use,
instead of running on without ever sending (an unconfigured backend alias: it logged at
every due task that it could not take its lease) or failing at its first due task; and
``manage.py check`` reports the same settings beforehand (``occupy.E407``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("celery")

import celery
from celery import Celery

from occupy.celery.beat import OccupyScheduler
from occupy.exceptions import InvalidBackendError
from occupy.taskcore.beat import beat_problems
from occupy.taskcore.checks import check_tasks


@pytest.fixture(autouse=True)
def _current_app() -> Iterator[None]:
    """Restore Celery's current app: a scheduler that raised at start leaves its own
    app current, and ``check`` (E406, E407) reads the current app."""
    previous = celery.current_app._get_current_object()
    yield
    previous.set_current()


def _scheduler(tmp_path: Path, **conf: Any) -> OccupyScheduler:
    app = Celery("beat_settings", set_as_current=False)
    app.conf.update(broker_url="memory://", beat_schedule={}, **conf)
    return OccupyScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))


def test_an_unconfigured_backend_alias_stops_beat_at_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidBackendError, match="under the alias 'nope'"):
        _scheduler(tmp_path, occupy_beat_backend="nope")


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("occupy_beat_ttl", -1, "ttl"),
        ("occupy_beat_ttl", 0, "ttl"),  # not the default: a ttl of nothing is no ttl
        ("occupy_beat_key", "beat\nkey", "control characters"),
    ],
)
def test_a_key_or_ttl_beat_cannot_use_stops_it_at_start(
    tmp_path: Path, setting: str, value: Any, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        _scheduler(tmp_path, **{setting: value})


def test_beat_starts_with_its_settings_or_their_defaults(tmp_path: Path) -> None:
    for conf in ({}, {"occupy_beat_backend": "default", "occupy_beat_ttl": 10}):
        scheduler = _scheduler(tmp_path, **conf)
        assert scheduler.occupy_lease is None  # nothing taken before a task is due
        scheduler.close()


def _app(namespace: str | None = None, **conf: Any) -> Celery:
    app = Celery("proj", set_as_current=False)
    app.conf.update(broker_url="memory://", **conf)
    if namespace is not None:
        app.namespace = namespace  # as config_from_object(..., namespace=...) sets it
    return app


@pytest.mark.parametrize(
    ("conf", "says"),
    [
        ({"occupy_beat_ttl": 0}, "CELERY_OCCUPY_BEAT_TTL must be positive"),
        ({"occupy_beat_ttl": "30"}, "CELERY_OCCUPY_BEAT_TTL must be a number"),
        ({"occupy_beat_key": "beat\nkey"}, "CELERY_OCCUPY_BEAT_KEY"),
        (
            {"occupy_beat_backend": "nope"},
            "Celery app proj's CELERY_OCCUPY_BEAT_BACKEND is 'nope', which "
            "OCCUPY['BACKENDS'] does not configure",
        ),
    ],
)
def test_check_reports_a_beat_setting_the_scheduler_would_refuse(
    conf: dict[str, Any], says: str
) -> None:
    [error] = beat_problems(_app("CELERY", **conf))
    assert error.id == "occupy.E407" and says in error.msg, error.msg
    assert "refuses to start" in (error.hint or "")


def test_check_names_the_setting_as_celery_spells_it_without_a_namespace() -> None:
    [error] = beat_problems(_app(occupy_beat_ttl=-5))
    assert error.msg.startswith("occupy_beat_ttl must be positive"), error.msg


def test_check_reads_beat_settings_only_where_beat_is_occupys() -> None:
    assert beat_problems(_app()) == []
    assert beat_problems(_app(occupy_beat_ttl=10, occupy_beat_backend="default")) == []
    assert beat_problems(_app(beat_scheduler="occupy.celery.beat:OccupyScheduler")) == []


def test_check_reports_the_current_apps_beat_settings() -> None:
    """``check`` reads the project's app (the current one), as the worker does."""
    previous = celery.current_app._get_current_object()
    try:
        app = Celery("proj_beat", broker="memory://")  # made current
        app.conf.occupy_beat_backend = "nope"
        found = [m for m in check_tasks() if m.id == "occupy.E407"]
        assert len(found) == 1 and "'nope'" in found[0].msg, found
    finally:
        previous.set_current()


def test_check_warns_of_a_setting_named_like_occupys_that_nothing_reads() -> None:
    """A misspelled setting is otherwise ignored without a word: beat runs on the
    default the project meant to change."""
    [warning] = beat_problems(_app("CELERY", occupy_beat_ttll=5))
    assert warning.id == "occupy.W407", warning
    assert "occupy_beat_ttll, which occupy does not read" in warning.msg
    assert "CELERY_OCCUPY_BEAT_TTL" in warning.msg  # the names it does read, as spelled
    assert beat_problems(_app(occupy_beat_ttl=10, task_default_queue="q")) == []
