"""occupy.testing is all a user's project needs: the small project in tests/userproject
(its own settings and pytest-django, nothing of tests/support) passes its suite, run in
a subprocess as its developers would, on every database, and its test database drops
cleanly with no teardown code of its own.

Before, the connections occupy made for the locks in its tests stayed open on the test
database (the main thread's for good, those of threads that ended until the garbage
collector ran), and pytest-django's teardown failed on PostgreSQL: "database is being
accessed by other users"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.aliases import SERVERS, database_params

PROJECT = Path(__file__).resolve().parent / "userproject"


#: SQLite in ``make test``; the servers, a subprocess suite each, in ``make test-slow``.
DATABASES = [
    param
    if param.id == "sqlite"
    else pytest.param(*param.values, id=param.id, marks=[*param.marks, pytest.mark.slow])
    for param in database_params(["sqlite", *SERVERS])
]


@pytest.mark.parametrize("database", DATABASES)
def test_the_user_project_passes_on(database: str) -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "PYTEST_"))
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
            # SQLite has one write lock per file, which a lock taken in a test's
            # transaction after it wrote would wait for: the database backend refuses
            # it, so these run on the servers, whose test databases must drop cleanly.
            *(["--ignore=tests/test_connections.py"] if database == "sqlite" else []),
        ],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    passed = 6 if database == "sqlite" else 12
    assert f"{passed} passed" in result.stdout and "skipped" not in result.stdout, output
    # pytest-django turns a teardown that failed into a warning and exits 0.
    assert "teardown test databases" not in output, output
    assert "warning" not in output.lower(), output
