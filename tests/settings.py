"""Settings for occupy's test suite, chosen by environment variables.

- ``OCCUPY_TEST_DB``: the ``default`` database: ``sqlite`` (the default), ``postgresql``
  or ``mysql``.
- ``OCCUPY_TEST_SUFFIX``: appended to the test database names, so that two checkouts
  can run their suites against the same servers at once.
- ``OCCUPY_TEST_REDIS_DB``: the Redis database number the tests use (default 0); every
  Redis key they create starts with :data:`REDIS_PREFIX`, so only those are wiped.
- ``OCCUPY_TEST_BACKEND`` (and ``OCCUPY_TEST_BACKEND_CONFIG``, JSON): a third-party
  backend class the contract suite is bound to as well, as alias ``extra``;
  ``OCCUPY_TEST_BACKEND_ONE_PROCESS=1`` if its store lives in one process's memory.
- ``OCCUPY_REQUIRE_SERVERS=1``: fail at start-up when PostgreSQL, MariaDB or Redis is
  not reachable (CI and ``make test-all``) instead of skipping the tests that need them.
- ``OCCUPY_TEST_PORTS``: the spare ports (``low-high``) of the servers the tests start
  themselves: the etcd clusters take ports from its top (the ``etcd`` backend's three
  members the top six, the failover test's the six below).
- ``OCCUPY_TEST_REDIS_DB_CACHE``: the Redis database number of the ``locks`` and
  ``locks-django`` caches the cache backend runs on (default 1). Every key the suite
  writes there starts with :data:`REDIS_KEY_PREFIX` and is deleted between tests.

Besides ``default``, every reachable server gets an alias of its own (``postgresql``,
``mysql``, and the ``redis`` cache and lock backend), so that the multiprocess tests run
on each of them in one session.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

HOST = os.environ.get("OCCUPY_TEST_HOST", "127.0.0.1")
REQUIRE_SERVERS = os.environ.get("OCCUPY_REQUIRE_SERVERS") == "1"
DEFAULT_DB = os.environ.get("OCCUPY_TEST_DB", "sqlite")
SUFFIX = os.environ.get("OCCUPY_TEST_SUFFIX", "")
REDIS_DB = int(os.environ.get("OCCUPY_TEST_REDIS_DB", "0"))
#: Prefix of every Redis key the tests create ("t-redis:" for OCCUPY_TEST_SUFFIX=_redis).
REDIS_PREFIX = f"t-{SUFFIX.lstrip('_') or 'occupy'}:"


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _server(name: str, port: int, module: str, install: str) -> str | None:
    """Return why a server cannot be used, named first, or ``None`` when it can."""
    if importlib.util.find_spec(module) is None:
        why = f"{name} (its driver {module!r} is not installed: {install})"
    elif not _reachable(port):
        why = f"{name} ({HOST}:{port} not answering)"
    else:
        return None
    if REQUIRE_SERVERS:
        raise ImproperlyConfigured(f"OCCUPY_REQUIRE_SERVERS=1 but {why}.")
    return why


#: Why each server's tests skip, by alias (absent: the server is there).
SKIPS = {
    alias: why
    for alias, why in {
        "postgresql": _server(
            "PostgreSQL", 5432, "psycopg", "pip install 'django-occupy[postgres]'"
        ),
        "mysql": _server("MariaDB", 3306, "MySQLdb", "make mysql-driver"),
        "redis": _server("Redis", 6379, "django_redis", "pip install 'django-occupy[redis]'"),
    }.items()
    if why
}

#: The etcd cluster the tests start (tests/conftest.py's ``etcd_cluster``): three members
#: on the top six spare ports of ``OCCUPY_TEST_PORTS``.
from tests.support.etcd_cluster import etcd_missing  # noqa: E402
from tests.support.ports import top_ports  # noqa: E402

ETCD_SIZE = 3
ETCD_BASE = top_ports(2 * ETCD_SIZE)
if (_etcd_why := etcd_missing()) is not None:
    if REQUIRE_SERVERS:
        raise ImproperlyConfigured(f"OCCUPY_REQUIRE_SERVERS=1 but {_etcd_why}.")
    SKIPS["etcd"] = _etcd_why
#: Whether RabbitMQ answers: the Celery tests run on it as broker (and on Redis).
RABBITMQ_UP = _reachable(5672)
if REQUIRE_SERVERS and importlib.util.find_spec("celery") is not None and not RABBITMQ_UP:
    raise ImproperlyConfigured(
        f"OCCUPY_REQUIRE_SERVERS=1 but RabbitMQ ({HOST}:5672) does not answer."
    )

_HERE = Path(__file__).resolve().parent  # SQLite files stay inside the checkout
DATABASE_CONFIGS: dict[str, dict[str, Any]] = {
    "sqlite": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_HERE / f".occupy{SUFFIX}.sqlite3"),
        "TEST": {"NAME": str(_HERE / f".occupy-test{SUFFIX}.sqlite3")},
        "OPTIONS": {"timeout": 30},  # WAL mode: tests/testapp/apps.py
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
        "TEST": {
            "NAME": f"test_occupy{SUFFIX}",
            "CHARSET": "utf8mb4",
            "COLLATION": "utf8mb4_unicode_ci",
        },
    },
}
if DEFAULT_DB not in DATABASE_CONFIGS:
    raise ImproperlyConfigured(f"OCCUPY_TEST_DB must be one of {sorted(DATABASE_CONFIGS)}.")
if DEFAULT_DB in SKIPS:
    raise ImproperlyConfigured(f"OCCUPY_TEST_DB={DEFAULT_DB} but {SKIPS[DEFAULT_DB]}.")

DATABASES = {"default": dict(DATABASE_CONFIGS[DEFAULT_DB])}
DATABASES.update({alias: dict(c) for alias, c in DATABASE_CONFIGS.items() if alias not in SKIPS})

#: The Redis database and key prefix of the caches the cache backend is tested on.
REDIS_DB_CACHE = int(os.environ.get("OCCUPY_TEST_REDIS_DB_CACHE", "1"))
REDIS_KEY_PREFIX = f"t{SUFFIX.replace('_', '-')}" if SUFFIX else "occupy-test"
#: Where the file backend keeps its locks (the same path in every spawned process).
FILES_LOCATION = str(_HERE / f".occupy{SUFFIX}-files")

CACHES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "locmem": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "occupy-locks",
    },
}
if "redis" not in SKIPS:
    _REDIS_URL = f"redis://{HOST}:6379/{REDIS_DB_CACHE}"
    CACHES["locks"] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": _REDIS_URL,
        "KEY_PREFIX": REDIS_KEY_PREFIX,
    }
    # Django's own Redis cache; VERSION keeps its keys apart from the django-redis ones.
    CACHES["locks-django"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": _REDIS_URL,
        "KEY_PREFIX": REDIS_KEY_PREFIX,
        "VERSION": 2,
    }

_CACHE_BACKEND = "occupy.backends.cache.CacheBackend"
#: The cache and file backends, on every cache reachable here.
STORE_BACKENDS = {
    "cache-locmem": {
        "BACKEND": _CACHE_BACKEND,
        "OPTIONS": {"CACHE": "locmem", "SINGLE_PROCESS": True},
    },
    "files": {"BACKEND": "occupy.backends.file.FileBackend", "LOCATION": FILES_LOCATION},
    # The README's "Writing a backend" example: the contract suite runs on it unchanged.
    "memory": {"BACKEND": "occupy.testing.MemoryBackend"},
}
#: A third-party backend to bind the contract suite to as well (alias ``extra``):
#: ``OCCUPY_TEST_BACKEND=dotted.path.Backend``, its settings as JSON in
#: ``OCCUPY_TEST_BACKEND_CONFIG`` (e.g. ``{"LOCATION": "...", "OPTIONS": {...}}``).
if os.environ.get("OCCUPY_TEST_BACKEND"):
    STORE_BACKENDS["extra"] = {
        "BACKEND": os.environ["OCCUPY_TEST_BACKEND"],
        **json.loads(os.environ.get("OCCUPY_TEST_BACKEND_CONFIG", "{}")),
    }
if "redis" not in SKIPS:
    STORE_BACKENDS["cache"] = {"BACKEND": _CACHE_BACKEND, "OPTIONS": {"CACHE": "locks"}}
    STORE_BACKENDS["cache-django"] = {
        "BACKEND": _CACHE_BACKEND,
        "OPTIONS": {"CACHE": "locks-django"},
    }
    # The add/get/set path memcached-like caches take, on a cache other processes share.
    STORE_BACKENDS["cache-addonly"] = {
        "BACKEND": "tests.support.backends.AddOnlyCacheBackend",
        "OPTIONS": {"CACHE": "locks"},
    }

#: One database backend per database alias, so every server runs the same tests.
OCCUPY: dict[str, Any] = {
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
        **STORE_BACKENDS,
    },
    "TTL": 60,
    "TIMEOUT": 10,
}

if "redis" not in SKIPS:
    CACHES["redis"] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://{HOST}:6379/{REDIS_DB}",
        "KEY_PREFIX": REDIS_PREFIX.rstrip(":"),
    }
    OCCUPY["BACKENDS"]["redis"] = {
        "BACKEND": "occupy.backends.redis.RedisBackend",
        "OPTIONS": {"CACHE": "redis", "PREFIX": f"{REDIS_PREFIX}occupy:"},
    }

if "etcd" not in SKIPS:
    OCCUPY["BACKENDS"]["etcd"] = {
        "BACKEND": "occupy.backends.etcd.EtcdBackend",
        "OPTIONS": {
            "ENDPOINTS": [f"http://127.0.0.1:{ETCD_BASE + i}" for i in range(ETCD_SIZE)],
            "PREFIX": f"{REDIS_PREFIX}occupy/",
        },
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
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "occupy",
    "tests.testapp",
]
# Django's tasks framework (occupy.django_tasks): django-tasks-db's database backend and
# worker, where it is installed (pip install 'django-occupy[test]'), for the task storm and
# the tests that need a worker. It is the suite's, never a user's need: importing it
# monkeypatches Django's classes (django-stubs-ext), so tests/test_tasks_project.py runs
# the same behaviour in a user's project with it hidden.
TASKS_DB = importlib.util.find_spec("django_tasks_db") is not None
if TASKS_DB and importlib.util.find_spec("django.tasks") is None:
    INSTALLED_APPS.append("django_tasks")
if TASKS_DB:
    INSTALLED_APPS.append("django_tasks_db")
_IMMEDIATE = (
    "django.tasks.backends.immediate.ImmediateBackend"
    if importlib.util.find_spec("django.tasks")
    else "django_tasks.backends.immediate.ImmediateBackend"
)
TASKS: dict[str, dict[str, Any]] = {"default": {"BACKEND": _IMMEDIATE}}
if TASKS_DB:
    TASKS["db"] = {"BACKEND": "django_tasks_db.DatabaseBackend"}
# The beat tests run django-celery-beat's DatabaseScheduler where it is installed.
if importlib.util.find_spec("django_celery_beat") is not None:
    INSTALLED_APPS.append("django_celery_beat")
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
# Test users are made many times; the default hasher would cost seconds each.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
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
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {"version": 1, "disable_existing_loggers": False}
