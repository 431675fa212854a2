"""occupy.testing is all a user's project needs: the small project in tests/userproject
(its own settings and pytest-django, nothing of tests/support) passes its suite, run in
a subprocess as its developers would, on every database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.aliases import SERVERS, database_params

PROJECT = Path(__file__).resolve().parent / "userproject"


@pytest.mark.parametrize("database", database_params(["sqlite", *SERVERS]))
def test_the_user_project_passes_on(database: str) -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if name != "DJANGO_SETTINGS_MODULE" and not name.startswith("PYTEST_")
    }
    env.update(SHOP_DB=database, SHOP_DB_SUFFIX=settings.SUFFIX, SHOP_DB_HOST=settings.HOST)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-W",
            "error::pytest.PytestWarning",
        ],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 passed" in result.stdout and "skipped" not in result.stdout, result.stdout
