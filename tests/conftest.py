"""Fixtures shared by the whole suite: real databases, clean lock tables, backends."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections

from tests.support import cleanup, telemetry
from tests.support.aliases import CONTRACT_BACKENDS, backend_params
from tests.support.cleanup import wipe
from tests.support.etcd_cluster import EtcdCluster

#: Users' projects with settings of their own, which tests/test_userproject.py and
#: tests/test_tasks_project.py run.
collect_ignore = ["userproject", "tasksproject"]


def pytest_configure(config: pytest.Config) -> None:
    """Record occupy's telemetry in memory for the whole run, where the SDK is installed."""
    telemetry.install()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if a full key, an owner or a token reached a metric or span attribute,
    a span's status, an event or a link anywhere in it (tests/support/telemetry.py)."""
    found = telemetry.recorded()
    leaks = [] if found is None else found.leaks()
    if leaks:
        session.config.get_terminal_writer().line(
            "occupy telemetry leaked keys, owners or tokens into attributes, span names, "
            "statuses, events or links:\n  " + "\n  ".join(sorted(set(leaks))[:50]),
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``extra`` each test bound to the backend under test (``OCCUPY_TEST_BACKEND``,
    alias ``extra``), whichever parameter binds it: ``pytest tests -m extra`` is then
    the whole generic suite for a third-party backend (docs/backends/writing.md), with
    no list of test files to keep up to date. (First, so that ``-m`` sees the mark.)"""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "extra" in [
            value for value in callspec.params.values() if isinstance(value, str)
        ]:
            item.add_marker(pytest.mark.extra)


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment: None, django_db_blocker) -> Iterator[None]:
    """Create and migrate the test database of every configured alias, once."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases=set(connections))
    yield
    with django_db_blocker.unblock():
        # The connections the databases were made with, closed before the drop: a test
        # that reloads DATABASES (override_settings) leaves them open but out of
        # ``connections``.
        for connection, _old_name, _destroy in config:
            connection.close()
        try:
            teardown_databases(config, verbosity=0)
        except Exception:
            _name_open_sessions()
            raise


def _name_open_sessions() -> None:
    """Name on stderr the sessions still open on the PostgreSQL test databases, when
    their drop failed. Nothing ends them by force: occupy closes its own connections,
    and those of Django's it opens in the threads that take locks, before Django drops
    a database (tests/backends/test_db_lifecycle.py; tests/userproject, a user's suite
    with no teardown code of its own), and so must this suite's live servers and
    workers: a session named here is a leak to find, not to hide.
    """
    for alias in connections:
        conn = connections[alias]
        if conn.vendor != "postgresql":
            continue
        with conn._nodb_cursor() as cursor:
            cursor.execute(
                "SELECT datname, pid, application_name, state, left(query, 120) "
                "FROM pg_stat_activity WHERE datname = %s",
                [conn.settings_dict["NAME"]],
            )
            for row in cursor.fetchall():
                print(f"\na session is still open on a test database: {row}", file=sys.stderr)


@pytest.fixture
def live_db(
    django_db_setup: None, django_db_blocker, request: pytest.FixtureRequest
) -> Iterator[None]:
    """Real, committed database access (locks commit on their own connection anyway), with
    every configured store up (the etcd cluster is started once per session)."""
    if "etcd" in settings.OCCUPY["BACKENDS"]:
        request.getfixturevalue("etcd_cluster")
    with django_db_blocker.unblock():
        wipe()
        yield
        wipe()


@pytest.fixture(scope="session")
def etcd_cluster() -> Iterator[EtcdCluster]:
    """The three-member etcd cluster of the ``etcd`` backend, for the whole session."""
    with EtcdCluster(settings.ETCD_SIZE, settings.ETCD_BASE) as cluster:
        cleanup.etcd_running = True
        try:
            yield cluster
        finally:
            cleanup.etcd_running = False


@pytest.fixture(params=backend_params(CONTRACT_BACKENDS))
def alias(request: pytest.FixtureRequest, live_db: None) -> str:
    """A backend alias; the test runs once per backend (``etcd`` starts its cluster)."""
    if request.param == "etcd":
        request.getfixturevalue("etcd_cluster")
        cleanup.wipe_etcd()
    return request.param


@pytest.fixture(params=backend_params([a for a in CONTRACT_BACKENDS if a != "default"]))
def model_store(request: pytest.FixtureRequest, live_db: None) -> str:
    """A backend alias other than ``default``, for a model's ``occupy_backend``; the test
    runs once per backend (``etcd`` starts its cluster)."""
    if request.param == "etcd":
        request.getfixturevalue("etcd_cluster")
        cleanup.wipe_etcd()
    return request.param


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any) -> Iterator[None]:
    """Name each server whose tests skipped, why, and how many, one line each, under the
    short summary (outside pytest's own wrapper, which prints that last)."""
    yield
    skipped: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
        server = next((why for why in settings.SKIPS.values() if why in reason), None)
        if server is not None:
            skipped[server] += 1
    if skipped:
        terminalreporter.write_sep("-", "servers not tested")
        for why, count in skipped.items():
            terminalreporter.write_line(f"skipped: {why} — {count} tests")
