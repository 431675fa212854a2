"""Which backend and database aliases the tests run on, and why one is skipped here."""

from __future__ import annotations

import os
from typing import Any, cast

import pytest
from django.conf import settings

__all__ = [
    "BACKEND_OF",
    "CONTRACT_BACKENDS",
    "DATABASE_BACKENDS",
    "ONE_PROCESS_BACKENDS",
    "RACE_BACKENDS",
    "SERVERS",
    "SERVER_OF",
    "SHARED_BACKENDS",
    "backend_params",
    "database_params",
    "server_skip",
]

#: Which server each backend alias needs (to skip with the server's reason).
SERVER_OF = {
    "db-postgresql": "postgresql",
    "db-mysql": "mysql",
    "cache": "redis",
    "cache-django": "redis",
    "cache-addonly": "redis",
}

#: The database backends (the ones ``make test-all`` runs again on each default database).
DATABASE_BACKENDS = ["default", "db-postgresql", "db-mysql"]

#: Every lock backend the contract suite is bound to.
CONTRACT_BACKENDS = [
    "default",
    "db-postgresql",
    "db-mysql",
    "redis",
    "cache",
    "cache-django",
    "cache-addonly",
    "cache-locmem",
    "files",
    "memory",
    "etcd",
    *(["extra"] if "extra" in settings.OCCUPY["BACKENDS"] else []),
]
#: The backends whose store lives in one process's memory (no multiprocess tests).
ONE_PROCESS_BACKENDS = [
    "cache-locmem",
    "memory",
    *(["extra"] if os.environ.get("OCCUPY_TEST_BACKEND_ONE_PROCESS") == "1" else []),
]

#: The backends whose store other processes see (every one not in one process's memory).
SHARED_BACKENDS = [alias for alias in CONTRACT_BACKENDS if alias not in ONE_PROCESS_BACKENDS]
#: The backends the slow races of several OS processes on one key run on: the built-in
#: stores of each kind (the others share their code), and a backend under test
#: (``OCCUPY_TEST_BACKEND``) whose store other processes see.
RACE_BACKENDS = [
    "default",
    "db-postgresql",
    "db-mysql",
    "redis",
    "cache",
    "files",
    *(["extra"] if "extra" in SHARED_BACKENDS else []),
]

#: The occupy backend that keeps its claims in each database alias.
BACKEND_OF = {
    "default": "default",
    "sqlite": "db-sqlite",
    "postgresql": "db-postgresql",
    "mysql": "db-mysql",
}

#: The servers the multiprocess tests run on (SQLite too where it can serialize).
SERVERS = ["postgresql", "mysql"]


def server_skip(alias: str) -> str | None:
    """Return why backend ``alias`` cannot run here, or ``None``."""
    if os.environ.get("OCCUPY_TEST_ONLY_DB") == "1" and alias not in DATABASE_BACKENDS:
        return "OCCUPY_TEST_ONLY_DB=1: store backends run in make test, not again here"
    if alias == f"db-{settings.DEFAULT_DB}":
        return f"the {settings.DEFAULT_DB} database is 'default' in this run"
    backends = cast("dict[str, Any]", settings.OCCUPY["BACKENDS"])
    if alias not in backends:
        server = SERVER_OF.get(alias, alias.removeprefix("db-"))
        return settings.SKIPS.get(server, f"backend {alias!r} is not configured")
    return None


def backend_params(aliases: list[str]) -> list[Any]:
    """Return pytest params for backend aliases, skipped with the server's reason."""
    params = []
    for alias in aliases:
        why = server_skip(alias)
        marks = [pytest.mark.skip(reason=why)] if why else []
        params.append(pytest.param(alias, id=alias, marks=marks))
    return params


def database_params(aliases: list[str]) -> list[Any]:
    """Return pytest params for database aliases, skipped with the server's reason."""
    params = []
    for alias in aliases:
        why = (
            None
            if alias in settings.DATABASES
            else settings.SKIPS.get(alias, f"database {alias!r} is not configured")
        )
        marks = [pytest.mark.skip(reason=why)] if why else []
        params.append(pytest.param(alias, id=alias, marks=marks))
    return params
