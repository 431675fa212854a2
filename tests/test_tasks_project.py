"""occupy.django_tasks works in a user's project as the how-to sets it up, with nothing
of the test suite: tests/tasksproject (its own settings; Django's immediate backend and
a queue backend of the project's own) runs in a subprocess where django-tasks-db is
hidden, and on Django 6 django-stubs-ext as well (the suite has both: their monkeypatch
made Django's Task subscriptable, which hid that occupy's tasks could not be imported on
Django 6.1). ``manage.py check`` there imports the app's tasks module and reports a
task whose occupy_backend is not configured (occupy.E401)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

if (
    importlib.util.find_spec("django.tasks") is None
    and importlib.util.find_spec("django_tasks") is None
):
    pytest.skip(
        "Django's tasks framework is not here (Django 5.2 without the django-tasks package: "
        "pip install 'django-occupy[tasks]')",
        allow_module_level=True,
    )

RUN = Path(__file__).resolve().parent / "tasksproject" / "run.py"


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_"))}
    environ.update(SHOP_DB_PATH=str(tmp_path / "shop.sqlite3"), **env)
    return subprocess.run(
        [sys.executable, str(RUN), *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tasks_of_a_users_project_run_under_their_leases(tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok ") == 4, result.stdout


def test_check_reports_a_task_whose_backend_is_not_configured(tmp_path: Path) -> None:
    assert _run(tmp_path, "check").returncode == 0
    result = _run(tmp_path, "check", SHOP_TASK_BACKEND="nope")
    assert result.returncode != 0
    assert "(occupy.E401) task shop.tasks.misrouted's occupy_backend is 'nope'" in result.stderr


def test_check_reports_a_tasks_module_that_raised_instead_of_a_traceback(
    tmp_path: Path,
) -> None:
    result = _run(tmp_path, "check", SHOP_RETRY_ON_IMMEDIATE="1")
    assert result.returncode != 0
    # check reported it (run.py's call_command raises SystemCheckError), not the import's
    # ValueError from inside occupy.django_tasks.
    assert "SystemCheckError" in result.stderr, result.stderr
    assert "django_tasks/base.py" not in result.stderr, result.stderr
    assert "(occupy.E405) shop.tasks raised ValueError when imported" in result.stderr
    assert "occupy_on_busy='retry'" in result.stderr
