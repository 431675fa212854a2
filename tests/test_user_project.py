"""A user's project on PostgreSQL (tests/user_project/) runs its suite and its test
database drops cleanly, with no teardown code of its own.

Before, the connections occupy made for the locks in its tests stayed open on the test
database (the main thread's for good, those of threads that ended until the garbage
collector ran), and pytest-django's teardown failed: "database is being accessed by
other users".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

PROJECT = Path(__file__).resolve().parent / "user_project"

pytestmark = pytest.mark.skipif(
    "postgresql" in settings.SKIPS, reason=settings.SKIPS.get("postgresql", "")
)


def test_a_users_suite_drops_its_test_database() -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "PYTEST_"))
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "6 passed" in output, output
    # pytest-django turns a teardown that failed into a warning and exits 0.
    assert "teardown test databases" not in output, output
    assert "warning" not in output.lower(), output
