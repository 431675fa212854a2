"""The example project's race_demo, run as a newcomer runs it (``make demo``)."""

from __future__ import annotations

import os
import re

import pytest

from tests.support.example_site import manage

pytestmark = pytest.mark.slow


def test_race_demo_shows_plain_django_losing_updates_and_occupy_losing_none(tmp_path) -> None:
    env = {**os.environ, "EXAMPLE_SQLITE": str(tmp_path / "library.sqlite3"),
           "DJANGO_SETTINGS_MODULE": "example_project.settings"}
    manage("migrate", "--verbosity", "0", env=env)
    table = manage("race_demo", env=env)
    rows = {}
    for line in table.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 6 and cells[2].isdigit():
            rows[(cells[0], cells[1])] = int(cells[3])
    plain = {race: lost for (technique, race), lost in rows.items()
             if technique.startswith("plain")}
    locked = {(technique, race): lost for (technique, race), lost in rows.items()
              if not technique.startswith("plain")}
    assert plain and all(lost > 0 for lost in plain.values()), table
    assert locked and all(lost == 0 for lost in locked.values()), table
    over_http = {technique for technique, race in rows if "over HTTP" in race}
    assert len(over_http) == 3, table
    assert re.search(r"edit lease.*retried after \d+ × 423", table), table
