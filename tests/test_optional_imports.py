"""Every module of occupy imports in a project without an optional dependency, or says
which extra to install: in a subprocess that hides the packages of one extra
(tests/support/import_probe.py), each module imports, or raises an error naming
``django-occupy[<extra>]``; and Celery's autodiscovery of ``<app>.tasks`` with
``"occupy"`` installed never fails (it imported ``occupy.tasks``, which needed the
tasks framework, and so killed every worker on Django 5.2 without the backport)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: extra -> the packages it installs, hidden as if it were not installed.
EXTRAS = {
    "celery": "celery",
    "drf": "rest_framework,drf_spectacular",
    "telemetry": "opentelemetry",
    "redis": "redis,django_redis",
    "etcd": "etcd3gw",
    "postgres": "psycopg",
    # Django 5.2 without the backport (Django 6 has django.tasks).
    "tasks": "django_tasks,django.tasks",
    "none": "",
}
#: Modules that no project imports: pytest loads its plugin, which needs pytest.
NOT_IMPORTED_BY_PROJECTS = {"occupy.testing.pytest_plugin"}


def _probe(hidden: str) -> list[list[str]]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.import_probe", hidden],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.endswith("done\n"), result.stderr
    return [line.split("\t") for line in result.stdout.splitlines()[:-1]]


#: The extras probed in ``make test``; the others, a subprocess each, in ``make
#: test-slow`` (and every extra is installed alone by ``make clean-install`` in CI).
QUICK = ("none", "celery", "drf")


@pytest.mark.parametrize(
    "extra",
    [pytest.param(e, marks=[] if e in QUICK else [pytest.mark.slow]) for e in EXTRAS],
)
def test_every_module_imports_or_names_the_extra_without(extra: str) -> None:
    failures = [f for f in _probe(EXTRAS[extra]) if f[0] not in NOT_IMPORTED_BY_PROJECTS]
    unclear = [f for f in failures if f"django-occupy[{extra}]" not in f[2]]
    assert not unclear, "\n".join("\t".join(f) for f in unclear)
    assert all(f[1] in ("ImportError", "InvalidBackendError") for f in failures), failures
    assert not [f for f in failures if f[0] == "celery autodiscovery"], failures


def test_the_django_tasks_integration_imports_without_the_framework_and_says_so_when_used() -> None:
    code = (
        "import sys\n"
        "from tests.support.import_probe import Hide\n"
        "sys.meta_path.insert(0, Hide(['django_tasks', 'django.tasks']))\n"
        "import occupy.django_tasks\n"
        "try:\n"
        "    from occupy.django_tasks import task\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'django-occupy[tasks]'" in result.stdout
