"""Fixtures of the model-side tests: clean test tables, database aliases to run on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.aliases import SERVERS, database_params
from tests.support.cleanup import wipe_tables


@pytest.fixture
def tables(live_db: None) -> Iterator[None]:
    """Real, committed database access with empty test tables (and no claims)."""
    wipe_tables()
    yield
    wipe_tables()


@pytest.fixture(params=database_params(SERVERS))
def server(request: pytest.FixtureRequest, tables: None) -> str:
    """A database alias of a real server; the test runs once per server."""
    return request.param


@pytest.fixture(params=database_params(["sqlite", *SERVERS]))
def database(request: pytest.FixtureRequest, tables: None) -> str:
    """A database alias, SQLite included; the test runs once per database."""
    return request.param
