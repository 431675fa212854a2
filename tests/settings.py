"""Settings for occupy's test suite, chosen by environment variables.

- ``OCCUPY_TEST_DB``: the ``default`` database: ``sqlite`` (the default), ``postgresql``
  or ``mysql``.
- ``OCCUPY_TEST_SUFFIX``: appended to the test database names, so that two checkouts
  can run their suites against the same servers at once.
- ``OCCUPY_REQUIRE_SERVERS=1``: fail at start-up when PostgreSQL, MariaDB or Redis is
  not reachable (CI and ``make test-all``) instead of skipping the tests that need them.

Besides ``default``, every reachable server gets an alias of its own (``postgresql``,
``mysql``), so that the multiprocess tests run on each of them in one session.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

HOST = os.environ.get("OCCUPY_TEST_HOST", "127.0.0.1")
REQUIRE_SERVERS = os.environ.get("OCCUPY_REQUIRE_SERVERS") == "1"
DEFAULT_DB = os.environ.get("OCCUPY_TEST_DB", "sqlite")
SUFFIX = os.environ.get("OCCUPY_TEST_SUFFIX", "")


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _server(name: str, port: int, module: str, extra: str) -> str | None:
    """Return why a server cannot be used, or ``None`` when it can."""
    if importlib.util.find_spec(module) is None:
        why = f"{name} needs the Python package {module!r} (pip install 'django-occupy[{extra}]')"
    elif not _reachable(port):
        why = f"{name} is not reachable at {HOST}:{port}"
    else:
        return None
    if REQUIRE_SERVERS:
        raise ImproperlyConfigured(f"OCCUPY_REQUIRE_SERVERS=1 but {why}.")
    return why


#: Why each server's tests skip, by alias (absent: the server is there).
SKIPS = {
    alias: why
    for alias, why in {
        "postgresql": _server("PostgreSQL", 5432, "psycopg", "postgres"),
        "mysql": _server("MariaDB", 3306, "MySQLdb", "mysql"),
        "redis": _server("Redis", 6379, "django_redis", "redis"),
    }.items()
    if why
}

_HERE = Path(__file__).resolve().parent  # SQLite files stay inside the checkout
DATABASE_CONFIGS = {
    "sqlite": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_HERE / f".occupy{SUFFIX}.sqlite3"),
        "TEST": {"NAME": str(_HERE / f".occupy-test{SUFFIX}.sqlite3")},
        "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
    },
    "postgresql": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "occupy",
        "USER": os.environ.get("OCCUPY_PG_USER", "postgres"),
        "HOST": HOST,
        "PORT": 5432,
        "TEST": {"NAME": f"test_occupy{SUFFIX}"},
    },
    "mysql": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "occupy",
        "USER": os.environ.get("OCCUPY_MYSQL_USER", "root"),
        "PASSWORD": "",
        "HOST": HOST,
        "PORT": 3306,
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {"NAME": f"test_occupy{SUFFIX}", "CHARSET": "utf8mb4",
                 "COLLATION": "utf8mb4_unicode_ci"},
    },
}
if DEFAULT_DB not in DATABASE_CONFIGS:
    raise ImproperlyConfigured(f"OCCUPY_TEST_DB must be one of {sorted(DATABASE_CONFIGS)}.")
if DEFAULT_DB in SKIPS:
    raise ImproperlyConfigured(f"OCCUPY_TEST_DB={DEFAULT_DB} but {SKIPS[DEFAULT_DB]}.")

DATABASES = {"default": dict(DATABASE_CONFIGS[DEFAULT_DB])}
DATABASES.update({alias: dict(c) for alias, c in DATABASE_CONFIGS.items() if alias not in SKIPS})

#: One database backend per database alias, so every server runs the same tests.
OCCUPY = {
    "BACKENDS": {
        "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
        **{
            f"db-{alias}": {
                "BACKEND": "occupy.backends.db.DatabaseBackend",
                "OPTIONS": {"DATABASE": alias},
            }
            for alias in DATABASES
            if alias != "default"
        },
    },
    "TTL": 60,
    "TIMEOUT": 10,
}

SECRET_KEY = "occupy-tests"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "occupy",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {"version": 1, "disable_existing_loggers": False}
