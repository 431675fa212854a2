"""The example project's race_demo, run as a newcomer runs it (``make demo``)."""

from __future__ import annotations

import os
import re

import pytest

from tests.support.example_site import manage

#: What is left in the example database after the demo: it must have deleted its rows.
LEFT_OVER = """
from django.contrib.auth.models import User
from example_project.library.models import Book, Task
from occupy.models import Occupation
print(Book.objects.count(), Task.objects.count(), Occupation.objects.count(),
      User.objects.count())
"""


pytestmark = pytest.mark.slow


def test_race_demo_shows_plain_django_losing_updates_and_occupy_losing_none(tmp_path) -> None:
    env = {
        **os.environ,
        "EXAMPLE_SQLITE": str(tmp_path / "library.sqlite3"),
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
    }
    manage("migrate", "--verbosity", "0", env=env)
    table = manage("race_demo", env=env)
    rows = {}
    for line in table.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 6 and cells[2].isdigit():
            rows[(cells[0], cells[1])] = tuple(int(cell) for cell in cells[2:5])
    assert {race for race, _technique in rows} == {
        "student and admin edit one book",
        "borrow counter",
        "stock decrement",
        "task pool",
        "task storm (one report per book)",
        "borrow counter over HTTP",
    }, table
    assert "seed" not in table, table
    plain = {
        key: lost for key, (_updates, lost, _refused) in rows.items() if key[1].startswith("plain")
    }
    guarded = {
        key: lost
        for key, (_updates, lost, _refused) in rows.items()
        if not key[1].startswith("plain")
    }
    assert plain and all(lost > 0 for lost in plain.values()), table
    assert guarded and all(lost == 0 for lost in guarded.values()), table
    # Every column counts updates: none is lost or refused twice.
    assert all(lost + refused <= updates for updates, lost, refused in rows.values()), table
    assert rows[("borrow counter", "VersionedMixin save(), no retry")][2] > 0, table
    # occupy.django_tasks skips the runs that find their book's report running (refused, said).
    assert rows[("task storm (one report per book)", "occupy.django_tasks.task(occupy_key)")][2] > 0
    assert re.search(r"\(occupy_key\): \d+ runs skipped \(and logged\)", table), table
    over_http = {technique for race, technique in rows if race.endswith("over HTTP")}
    assert len(over_http) == 3, table
    assert re.search(r"edit lease.*retried after \d+ × 423", table), table
    left = manage("shell", "--command", LEFT_OVER, env=env).splitlines()[-1]
    assert left.split() == ["0", "0", "0", "0"], f"books, tasks, claims, users left: {left}"
