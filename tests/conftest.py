"""Fixtures shared by the whole suite: real databases, clean lock tables, backends."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

from occupy.backends import reset_backends
from tests.support.aliases import CONTRACT_BACKENDS, backend_params
from tests.support.cleanup import wipe

#: A project of its own, with its own settings: tests/test_userproject.py runs its suite.
collect_ignore = ["userproject"]


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
        _end_other_sessions()
        teardown_databases(config, verbosity=0)


def _end_other_sessions() -> None:
    """End the sessions still open on the PostgreSQL test databases, so that they can be
    dropped: a connection the backend opened in a worker thread that has ended is closed
    only when the garbage collector gets to it, which may be after the drop."""
    for alias in connections:
        conn = connections[alias]
        if conn.vendor != "postgresql":
            continue
        with conn.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        conn.close()


@pytest.fixture
def live_db(django_db_setup: None, django_db_blocker) -> Iterator[None]:
    """Real, committed database access (locks commit on their own connection anyway)."""
    with django_db_blocker.unblock():
        wipe()
        yield
        wipe()


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
