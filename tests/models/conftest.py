"""Fixtures of the model-side tests: clean test tables, database aliases to run on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connections

#: The test tables, children before parents.
TABLES = [
    "testapp_ebook", "testapp_book", "testapp_chapter", "testapp_strictbook", "testapp_uuidbook",
    "testapp_shelf", "testapp_label", "testapp_goods", "testapp_task", "testapp_document",
    "testapp_page",
]

#: The occupy backend that keeps its claims in each database alias.
BACKEND_OF = {"default": "default", "sqlite": "db-sqlite", "postgresql": "db-postgresql",
              "mysql": "db-mysql"}


def wipe_tables() -> None:
    """Delete every row of the model-side test tables in every test database."""
    for alias in connections:
        with connections[alias].cursor() as cursor:
            for table in TABLES:
                cursor.execute(f"DELETE FROM {table}")


@pytest.fixture
def tables(live_db: None) -> Iterator[None]:
    """Real, committed database access with empty test tables (and no claims)."""
    wipe_tables()
    yield
    wipe_tables()


def database_params(aliases: list[str]) -> list:
    """Return pytest params for database aliases, skipped with the server's reason."""
    params = []
    for alias in aliases:
        why = None if alias in settings.DATABASES else settings.SKIPS.get(
            alias, f"database {alias!r} is not configured")
        marks = [pytest.mark.skip(reason=why)] if why else []
        params.append(pytest.param(alias, id=alias, marks=marks))
    return params


#: The servers the multiprocess tests run on (SQLite too where it can serialize).
SERVERS = ["postgresql", "mysql"]


@pytest.fixture(params=database_params(SERVERS))
def server(request: pytest.FixtureRequest, tables: None) -> str:
    """A database alias of a real server; the test runs once per server."""
    return request.param


@pytest.fixture(params=database_params(["sqlite", *SERVERS]))
def database(request: pytest.FixtureRequest, tables: None) -> str:
    """A database alias, SQLite included; the test runs once per database."""
    return request.param
