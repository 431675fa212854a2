"""Django settings of the scale benchmarks: the test settings, on stores of their own.

The scale runs fill their stores with up to a million claims, so nothing they write
may share a table, a file or a Redis key pattern with anything else:

- PostgreSQL and MariaDB: the database ``OCCUPY_BENCH_SCALE_DB`` (default
  ``occupy_scale``), created by the benchmark if it is missing;
- SQLite and the file backend: ``.scale{OCCUPY_TEST_SUFFIX}.sqlite3`` and
  ``.scale{OCCUPY_TEST_SUFFIX}-files/`` beside this module (ignored by git);
- and for the live-claims curve, one more of each per size (``SLOTS``): databases
  ``<name>_<slot>`` (aliases ``postgresql-<slot>``, …, backends ``db-postgresql-<slot>``),
  SQLite files and file-backend directories ``…-<slot>``, so that the sizes coexist
  and their rounds can alternate;
- Redis: the test settings' database numbers (``OCCUPY_TEST_REDIS_DB`` for the Redis
  backend, ``OCCUPY_TEST_REDIS_DB_CACHE`` for the cache backend), under prefixes that
  end in ``scale``; every key under them is deleted at the end of a run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

from tests.settings import *  # noqa: F403
from tests.settings import (
    DATABASES,
    OCCUPY,
    REDIS_KEY_PREFIX,
    REDIS_PREFIX,
    SKIPS,
    SUFFIX,
)

#: The database the scale runs use on PostgreSQL and MariaDB.
SCALE_DB = os.environ.get("OCCUPY_BENCH_SCALE_DB", "occupy_scale")
_HERE = Path(__file__).resolve().parent
#: Where SQLite's file and the file backend's directory live.
SCRATCH = _HERE / f".scale{SUFFIX}"

for _alias in ("postgresql", "mysql"):
    if _alias in DATABASES:
        DATABASES[_alias]["NAME"] = SCALE_DB
if "sqlite" in DATABASES:
    DATABASES["sqlite"]["NAME"] = f"{SCRATCH}.sqlite3"
DATABASES["default"] = dict(DATABASES["sqlite"])

_BACKENDS = cast(dict[str, Any], OCCUPY["BACKENDS"])

#: How many sizes of the live-claims curve coexist, each in stores of its own.
SLOTS = 3
for _slot in range(SLOTS):
    for _alias in ("postgresql", "mysql", "sqlite"):
        if _alias not in DATABASES:
            continue
        _config = dict(DATABASES[_alias])
        if _alias == "sqlite":
            _config["NAME"] = f"{SCRATCH}-{_slot}.sqlite3"
        else:
            _config["NAME"] = f"{SCALE_DB}_{_slot}"
        DATABASES[f"{_alias}-{_slot}"] = _config
        _BACKENDS[f"db-{_alias}-{_slot}"] = {
            "BACKEND": "occupy.backends.db.DatabaseBackend",
            "OPTIONS": {"DATABASE": f"{_alias}-{_slot}"},
        }
    _BACKENDS[f"files-{_slot}"] = {
        "BACKEND": "occupy.backends.file.FileBackend",
        "LOCATION": f"{SCRATCH}-files-{_slot}",
    }

#: What every Redis key of the Redis backend starts with here.
SCALE_REDIS_PREFIX = f"{REDIS_PREFIX}scale:"
#: What the cache backend's cache puts before every key (``KEY_PREFIX``).
SCALE_CACHE_PREFIX = f"{REDIS_KEY_PREFIX}-scale"

_BACKENDS["files"]["LOCATION"] = f"{SCRATCH}-files"
if "redis" not in SKIPS:
    _BACKENDS["redis"]["OPTIONS"]["PREFIX"] = SCALE_REDIS_PREFIX
    for _cache in ("locks", "locks-django"):
        CACHES[_cache]["KEY_PREFIX"] = SCALE_CACHE_PREFIX  # noqa: F405
