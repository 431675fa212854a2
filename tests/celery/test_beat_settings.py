"""occupy's beat scheduler refuses at start a setting of its lease that it cannot use,
instead of running on without ever sending (an unconfigured backend alias: it logged at
every due task that it could not take its lease) or failing at its first due task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("celery")

from celery import Celery

from occupy.celery.beat import OccupyScheduler
from occupy.exceptions import InvalidBackendError


def _scheduler(tmp_path: Path, **conf: Any) -> OccupyScheduler:
    app = Celery("beat_settings", set_as_current=False)
    app.conf.update(broker_url="memory://", beat_schedule={}, **conf)
    return OccupyScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))


def test_an_unconfigured_backend_alias_stops_beat_at_start(tmp_path: Path) -> None:
    with pytest.raises(InvalidBackendError, match="under the alias 'nope'"):
        _scheduler(tmp_path, occupy_beat_backend="nope")


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [("occupy_beat_ttl", -1, "ttl"), ("occupy_beat_key", "beat\nkey", "control characters")],
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
