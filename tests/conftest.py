"""Fixtures shared by the whole suite: real databases, clean lock tables, backends."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connections

from occupy.backends import reset_backends

#: Which server each backend alias needs (to skip with the server's reason).
SERVER_OF = {"db-postgresql": "postgresql", "db-mysql": "mysql", "cache": "redis",
             "cache-django": "redis", "cache-addonly": "redis"}


#: The database backends (the ones ``make test-all`` runs again on each default database).
DATABASE_BACKENDS = ["default", "db-postgresql", "db-mysql"]


def server_skip(alias: str) -> str | None:
    """Return why backend ``alias`` cannot run here, or ``None``."""
    if os.environ.get("OCCUPY_TEST_ONLY_DB") == "1" and alias not in DATABASE_BACKENDS:
        return "OCCUPY_TEST_ONLY_DB=1: store backends run in make test, not again here"
    if alias == f"db-{settings.DEFAULT_DB}":
        return f"the {settings.DEFAULT_DB} database is 'default' in this run"
    if alias not in settings.OCCUPY["BACKENDS"]:
        server = SERVER_OF.get(alias, alias.removeprefix("db-"))
        return settings.SKIPS.get(server, f"backend {alias!r} is not configured")
    return None


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment: None, django_db_blocker) -> Iterator[None]:
    """Create and migrate the test database of every configured alias, once."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases=set(connections))
    yield
    with django_db_blocker.unblock():
        for alias in connections:
            connections[alias].close()
        reset_backends()
        teardown_databases(config, verbosity=0)


def wipe() -> None:
    """Delete every claim and test row in every test database, cache and lock directory."""
    for alias in connections:
        with connections[alias].cursor() as cursor:
            cursor.execute("DELETE FROM occupy_occupation")
            cursor.execute("DELETE FROM testapp_counter")
    wipe_stores()


def wipe_stores() -> None:
    """Delete the suite's Redis keys (by prefix), the locmem cache and the lock files."""
    caches["locmem"].clear()
    shutil.rmtree(settings.FILES_LOCATION, ignore_errors=True)
    if "redis" in settings.CACHES:
        from django_redis import get_redis_connection

        client = get_redis_connection("redis")
        names = list(client.scan_iter(match=f"{settings.REDIS_PREFIX}*", count=1000))
        if names:
            client.delete(*names)
    if "locks" in settings.CACHES:
        from django_redis import get_redis_connection

        client = get_redis_connection("locks")
        names = list(client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}:*", count=1000))
        if names:
            client.delete(*names)


@pytest.fixture
def live_db(django_db_setup: None, django_db_blocker) -> Iterator[None]:
    """Real, committed database access (locks commit on their own connection anyway)."""
    with django_db_blocker.unblock():
        wipe()
        yield
        wipe()


def backend_params(aliases: list[str]) -> list:
    """Return pytest params for backend aliases, skipped with the server's reason."""
    params = []
    for alias in aliases:
        why = server_skip(alias)
        marks = [pytest.mark.skip(reason=why)] if why else []
        params.append(pytest.param(alias, id=alias, marks=marks))
    return params


#: Every lock backend the contract suite is bound to.
CONTRACT_BACKENDS = ["default", "db-postgresql", "db-mysql", "redis", "cache", "cache-django",
                     "cache-addonly", "cache-locmem", "files"]


@pytest.fixture(params=backend_params(CONTRACT_BACKENDS))
def using(request: pytest.FixtureRequest, live_db: None) -> str:
    """A backend alias; the test runs once per backend."""
    return request.param


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any) -> Iterator[None]:
    """Name each server whose tests skipped, why, and how many, one line each, under the
    short summary (outside pytest's own wrapper, which prints that last)."""
    yield
    skipped: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple)
                     else report.longrepr)
        server = next((why for why in settings.SKIPS.values() if why in reason), None)
        if server is not None:
            skipped[server] += 1
    if skipped:
        terminalreporter.write_sep("-", "servers not tested")
        for why, count in skipped.items():
            terminalreporter.write_line(f"skipped: {why} — {count} tests")
