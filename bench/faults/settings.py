"""Django settings of the fault soak's workers: only the private servers it started.

The coordinator (:mod:`bench.faults`) passes where its servers listen in environment
variables; a worker reads them here, so nothing in these settings can reach the shared
servers on the standard ports:

- ``OCCUPY_FAULTS_DIR``: the run's temporary directory (SQLite's file, the file
  backend's directory);
- ``OCCUPY_FAULTS_PG_PORT``, ``OCCUPY_FAULTS_MARIADB_PORT``: the private PostgreSQL and
  MariaDB servers (database ``occupy``), absent when the run leaves them out;
- ``OCCUPY_FAULTS_REDIS_AOF_PORT``, ``OCCUPY_FAULTS_REDIS_PORT``: the private Redis
  servers with and without the append-only file;
- ``OCCUPY_FAULTS_PENDING_TTL``: the database and file backends' ``PENDING_TTL`` (how
  long a dead waiter's queued claim holds its place), when not the default;
- ``OCCUPY_FAULTS_EXTRA_BACKENDS``: more backends, JSON (alias → configuration), for a
  soak of a store that is not one of occupy's (the harness's own tests soak a lock that
  does not lock, to see it fail).

Backend aliases are the store names of :data:`bench.faults.stores.STORES`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
RUN_DIR = Path(os.environ.get("OCCUPY_FAULTS_DIR", "/nonexistent"))

DATABASES: dict[str, dict[str, Any]] = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(RUN_DIR / "occupy.sqlite3"),
        "OPTIONS": {"timeout": 30},
    },
}
CACHES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"},
}
BACKENDS: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
    "sqlite": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
    "files": {"BACKEND": "occupy.backends.file.FileBackend", "LOCATION": str(RUN_DIR / "files")},
}

if os.environ.get("OCCUPY_FAULTS_PG_PORT"):
    DATABASES["postgresql"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "occupy",
        "USER": "postgres",
        "HOST": HOST,
        "PORT": int(os.environ["OCCUPY_FAULTS_PG_PORT"]),
    }
    BACKENDS["postgresql"] = {
        "BACKEND": "occupy.backends.db.DatabaseBackend",
        "OPTIONS": {"DATABASE": "postgresql"},
    }
if os.environ.get("OCCUPY_FAULTS_MARIADB_PORT"):
    DATABASES["mariadb"] = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "occupy",
        "USER": "root",
        "PASSWORD": "",
        "HOST": HOST,
        "PORT": int(os.environ["OCCUPY_FAULTS_MARIADB_PORT"]),
        "OPTIONS": {"charset": "utf8mb4"},
    }
    BACKENDS["mariadb"] = {
        "BACKEND": "occupy.backends.db.DatabaseBackend",
        "OPTIONS": {"DATABASE": "mariadb"},
    }
for _name, _variable in (
    ("redis-aof", "OCCUPY_FAULTS_REDIS_AOF_PORT"),
    ("redis", "OCCUPY_FAULTS_REDIS_PORT"),
):
    if os.environ.get(_variable):
        CACHES[_name] = {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{HOST}:{os.environ[_variable]}/0",
        }
        BACKENDS[_name] = {
            "BACKEND": "occupy.backends.redis.RedisBackend",
            "OPTIONS": {"CACHE": _name},
        }
        BACKENDS[f"cache-{_name}"] = {
            "BACKEND": "occupy.backends.cache.CacheBackend",
            "OPTIONS": {"CACHE": _name},
        }

if os.environ.get("OCCUPY_FAULTS_PENDING_TTL"):
    for _config in BACKENDS.values():
        if _config["BACKEND"].endswith(("DatabaseBackend", "FileBackend")):
            _config.setdefault("OPTIONS", {})["PENDING_TTL"] = float(
                os.environ["OCCUPY_FAULTS_PENDING_TTL"]
            )

BACKENDS.update(json.loads(os.environ.get("OCCUPY_FAULTS_EXTRA_BACKENDS", "{}")))

OCCUPY: dict[str, Any] = {"BACKENDS": BACKENDS}
SECRET_KEY = "occupy-faults"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django.contrib.contenttypes", "occupy"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "root": {"handlers": [], "level": "CRITICAL"},
}
