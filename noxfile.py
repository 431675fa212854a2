"""The version matrix: occupy's suite on each end of the supported range, and its model
and contract suites on the combinations in between.

    nox                                   # every session whose Python is installed
    nox -s newest                         # one session
    nox -s oldest -- tests/models -x      # arguments after -- go to pytest
    nox -l                                # the sessions

=========  ======  ==========  ==============================================  =========
session    Python  Django      DRF, drf-spectacular, django-redis, redis-py    suites
=========  ======  ==========  ==============================================  =========
newest     3.13    6.1         the newest                                      all (*)
oldest     3.10    5.2 LTS     the oldest pyproject.toml allows                contract,
                                                                               models,
                                                                               DRF (*)
django60   3.12    6.0         the newest                                      contract,
                                                                               models (*)
django52   3.13    5.2 LTS     the newest                                      contract,
                                                                               models (*)
=========  ======  ==========  ==============================================  =========

(*) in one process: the tests marked ``multiprocess`` are left out there (they race
the stores from several processes, which is the drivers' and servers' business, and
``make test`` runs them), and so are the tests marked slow. "All" is every other test
of ``make test``; CI runs every session, within its time budget. The interpreters are
found on ``PATH`` as ``python3.X`` (with pyenv:
``PYENV_VERSION=3.11.7:3.10.13:3.12.1:3.13.0``; ``.ci/run`` sets it to pyenv's newest
of each). A session whose Python is not installed here is skipped with nox's "Python
interpreter 3.X not found" line, not failed, and the others run. The tests use the
servers that answer, as ``make test`` does; set the ``OCCUPY_TEST_*`` variables
(tests/settings.py) as for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
# A Python missing here skips its sessions, on CI too (where nox would fail them).
nox.options.error_on_missing_interpreters = False

#: The oldest versions pyproject.toml allows (its floors), pinned.
OLDEST = [
    "Django~=5.2.0",
    "djangorestframework==3.16.0",
    "drf-spectacular==0.28.0",
    "django-redis==6.0.0",
    "redis==8.0.0",
    "psycopg[binary]==3.2.4",
    "etcd3gw==2.7.0",
]
#: The newest of each, on the given Django.
NEWEST = ["djangorestframework", "drf-spectacular", "django-redis", "redis", "psycopg[binary]"]

#: The suites of the sessions in the middle of the range: the backends' contract and the
#: model side, where a Django release changes what occupy builds on; in one process (the
#: tests that race several processes are the drivers' and stores' business, which the
#: whole suite at each end covers, and they are half the time of these suites).
CORE = ["tests/backends/test_contract.py", "tests/models", "-m", "not multiprocess"]
#: The oldest pins matter most where occupy meets DRF, drf-spectacular and django-redis.
OLDEST_SUITES = [
    "tests/backends/test_contract.py",
    "tests/models",
    "tests/rest_framework",
    "tests/test_checks.py",
    "-m",
    "not slow and not multiprocess",
]

#: session name -> (Python, pins, default pytest arguments)
MATRIX: dict[str, tuple[str, list[str], list[str]]] = {
    "newest": ("3.13", ["Django~=6.1.0", *NEWEST], ["-m", "not slow and not multiprocess"]),
    "oldest": ("3.10", OLDEST, OLDEST_SUITES),
    "django60": ("3.12", ["Django~=6.0.0", *NEWEST], CORE),
    "django52": ("3.13", ["Django~=5.2.0", *NEWEST], CORE),
}

SHOW_VERSIONS = """
import importlib.metadata as m, sys
names = ["Django", "djangorestframework", "drf-spectacular", "django-redis", "redis", "psycopg"]
print(f"Python {sys.version.split()[0]}", *(f"{n} {m.version(n)}" for n in names), sep=", ")
"""


def mysql_headers() -> bool:
    """Return whether mysqlclient can be compiled here (the MariaDB/MySQL client headers)."""
    if shutil.which("mysql_config"):
        return True
    for name in ("libmariadb", "mysqlclient"):
        try:
            subprocess.run(["pkg-config", "--exists", name], check=True)
        except (OSError, subprocess.CalledProcessError):
            continue
        return True
    return False


def run_suite(session: nox.Session, name: str) -> None:
    """Install the versions of ``name`` and run its suites (or the arguments after --)."""
    _, pins, suites = MATRIX[name]
    extras = "test,mysql" if mysql_headers() else "test"
    session.install("--upgrade", "-e", f".[{extras}]", *pins)
    session.run("python", "-c", SHOW_VERSIONS)
    args = session.posargs or ["-q", "-p", "no:randomly", *suites]
    session.run(
        "python",
        "-m",
        "pytest",
        *args,
        env={"OCCUPY_TEST_SUFFIX": os.environ.get("OCCUPY_TEST_SUFFIX", f"_nox_{name}")},
    )


@nox.session(python=MATRIX["newest"][0])
def newest(session: nox.Session) -> None:
    """Django 6.1 on Python 3.13 with the newest DRF, django-redis and redis-py: all."""
    run_suite(session, "newest")


@nox.session(python=MATRIX["oldest"][0])
def oldest(session: nox.Session) -> None:
    """Django 5.2 on Python 3.10 with the oldest DRF, django-redis and redis-py: all."""
    run_suite(session, "oldest")


@nox.session(python=MATRIX["django60"][0])
def django60(session: nox.Session) -> None:
    """Django 6.0 on Python 3.12: the contract and model suites."""
    run_suite(session, "django60")


@nox.session(python=MATRIX["django52"][0])
def django52(session: nox.Session) -> None:
    """Django 5.2 on Python 3.13 with the newest of the rest: the contract and model suites."""
    run_suite(session, "django52")
