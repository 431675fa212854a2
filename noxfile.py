"""The version matrix: occupy's suite on each supported Python, on the oldest and the
newest supported versions of Django, Django REST framework and django-redis.

    nox                                   # every session whose Python is installed
    nox -s "tests-3.11(oldest)" -- tests/backends/test_contract.py tests/models
    nox -l                                # the sessions

A session whose Python is not installed here is skipped, not failed. Arguments after
``--`` go to pytest (default: the whole suite). The tests use the servers that answer,
as ``make test`` does; set the ``OCCUPY_TEST_*`` variables (tests/settings.py) as for it.
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

PYTHONS = ["3.10", "3.11", "3.12"]

#: The pins of each end of the supported range: Django LTS releases, and the oldest and
#: newest DRF, drf-spectacular and django-redis that pyproject.toml allows.
VERSIONS = {
    "oldest": ["Django~=4.2.0", "djangorestframework==3.15.1", "drf-spectacular==0.27.0",
               "django-redis==5.4.0"],
    "newest": ["Django~=5.2.0", "djangorestframework", "drf-spectacular", "django-redis"],
}


SHOW_VERSIONS = """
import importlib.metadata as m, sys
names = ["Django", "djangorestframework", "drf-spectacular", "django-redis", "redis"]
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


@nox.session(python=PYTHONS)
@nox.parametrize("versions", list(VERSIONS), ids=list(VERSIONS))
def tests(session: nox.Session, versions: str) -> None:
    """Run the suite on one Python with the oldest or the newest supported versions."""
    extras = "test,mysql" if mysql_headers() else "test"
    session.install("--upgrade", "-e", f".[{extras}]", *VERSIONS[versions])
    session.run("python", "-c", SHOW_VERSIONS)
    session.run("python", "-m", "pytest", *(session.posargs or ["-q"]),
                env={"OCCUPY_TEST_SUFFIX": os.environ.get("OCCUPY_TEST_SUFFIX",
                                                          f"_nox_{versions}")})
