"""occupy's own database connections follow Django's lifecycle
(:mod:`occupy.backends.lifecycle`): closed at the end of a request per ``CONN_MAX_AGE``,
when the thread that made them ends, by ``close_connections()``, and before Django
drops a database.

Before, a connection made in a thread that ended stayed open on the server until the
garbage collector happened to run (Django's wrappers hold reference cycles), and nothing
closed a connection at the end of a request: a user's test database could not be
dropped ("database is being accessed by other users"). Every test here runs with the
garbage collector off, so that only occupy's own closing can end a session.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.signals import request_finished, request_started
from django.db import connections
from django.test import Client, override_settings

import occupy
from occupy.backends import close_connections, get_backend
from occupy.exceptions import StoreUnavailable
from tests.support import multiproc
from tests.support.aliases import backend_params

ALIAS = "db-postgresql"
#: How long a closed session may take to leave pg_stat_activity (the server process
#: exits after the client's goodbye): a bound on a wait, not a timed assertion.
GONE_WITHIN = 10.0


@pytest.fixture(params=backend_params([ALIAS]))
def alias(request: pytest.FixtureRequest, live_db: None) -> Iterator[str]:
    """The PostgreSQL backend, with the garbage collector off for the test."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield request.param
    finally:
        if enabled:
            gc.enable()


def _session_of_this_thread(alias: str) -> int:
    """Take and release a lock, and return the server session it ran on."""
    occupy.release(occupy.acquire("lifecycle", ttl=30, backend=alias))
    return int(get_backend(alias).store.execute("SELECT pg_backend_pid()", [])[1][0][0])


def _open(sessions: set[int]) -> set[int]:
    """Return which of ``sessions`` are still on the server."""
    with connections["postgresql"].cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", [list(sessions)])
        return {row[0] for row in cursor.fetchall()}


def _wait_gone(sessions: set[int]) -> set[int]:
    """Wait (bounded) until ``sessions`` left the server; return those still there."""
    deadline = time.monotonic() + GONE_WITHIN
    while (left := _open(sessions)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_a_thread_that_ends_closes_its_connection(alias: str) -> None:
    sessions: list[int] = []
    thread = threading.Thread(target=lambda: sessions.append(_session_of_this_thread(alias)))
    thread.start()
    thread.join()
    assert sessions
    assert _wait_gone(set(sessions)) == set()


def test_a_thread_whose_statement_failed_closes_its_connection(alias: str) -> None:
    # A statement's error keeps the frames that ran it, and so their thread's
    # connection, for as long as its traceback lives, and Django's error wrapper puts
    # that traceback in a reference cycle (its __exit__ frame holds the error): only the
    # garbage collector frees it. An acquire meets such an error in its normal course (a
    # grant that loses a race for the key's slot catches an IntegrityError).
    sessions: list[int] = []

    def fail_once() -> None:
        sessions.append(_session_of_this_thread(alias))
        with suppress(StoreUnavailable):
            get_backend(alias).store.execute("SELECT 1 / 0", [])

    thread = threading.Thread(target=fail_once)
    thread.start()
    thread.join()
    assert sessions
    assert _wait_gone(set(sessions)) == set()


def test_a_thread_pool_that_shuts_down_closes_its_connections(alias: str) -> None:
    with ThreadPoolExecutor(4) as pool:
        sessions = set(pool.map(lambda _: _session_of_this_thread(alias), range(16)))
    assert _wait_gone(sessions) == set()


def test_sync_to_async_threads_close_their_connections(alias: str) -> None:
    async def locks() -> set[int]:
        found = set()
        for _ in range(4):
            found.add(await sync_to_async(_session_of_this_thread, thread_sensitive=False)(alias))
            lease = await occupy.aacquire("lifecycle-async", ttl=30, backend=alias)
            await occupy.arelease(lease)
        return found

    sessions = async_to_sync(locks)()  # its event loop and executor end with it
    assert _wait_gone(sessions) == set()


def test_the_end_of_a_request_closes_the_connection_past_conn_max_age(alias: str) -> None:
    # CONN_MAX_AGE 0 (Django's default): closed at the end of every request.
    session = _session_of_this_thread(alias)
    request_finished.send(sender=__name__)
    assert _wait_gone({session}) == set()


def test_a_request_keeps_a_connection_within_conn_max_age(alias: str) -> None:
    database = get_backend(alias).database
    settings_dict = connections.settings[database]
    close_connections()
    old = settings_dict["CONN_MAX_AGE"]
    settings_dict["CONN_MAX_AGE"] = 600
    try:
        session = _session_of_this_thread(alias)
        request_started.send(sender=__name__)
        request_finished.send(sender=__name__)
        assert _session_of_this_thread(alias) == session
    finally:
        settings_dict["CONN_MAX_AGE"] = old
        close_connections()
    assert _wait_gone({session}) == set()


def test_close_connections_closes_those_of_every_thread(alias: str) -> None:
    made = threading.Event()
    done = threading.Event()
    sessions: list[int] = []

    def hold() -> None:
        sessions.append(_session_of_this_thread(alias))
        made.set()
        done.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert made.wait(30)
        sessions.append(_session_of_this_thread(alias))
        close_connections()
        assert _wait_gone(set(sessions)) == set()
        assert _session_of_this_thread(alias) not in sessions  # it connects again
    finally:
        done.set()
        thread.join()


def test_django_connecting_to_drop_a_database_closes_occupy_connections(alias: str) -> None:
    sessions: list[int] = []
    done = threading.Event()
    made = threading.Event()

    def hold() -> None:
        sessions.append(_session_of_this_thread(alias))
        made.set()
        done.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert made.wait(30)
        sessions.append(_session_of_this_thread(alias))
        # What Django does before it creates or drops a (test) database.
        with connections["postgresql"]._nodb_cursor() as cursor:
            cursor.execute("SELECT 1")
        assert _wait_gone(set(sessions)) == set()
    finally:
        done.set()
        thread.join()


@override_settings(ROOT_URLCONF="tests.backends.lifecycle_urls")
def test_a_request_through_django_leaves_no_session(alias: str, client: Client) -> None:
    sessions = set()
    for _ in range(5):
        response = client.post("/lock/")
        assert response.status_code == 200, response.content
        sessions.add(int(response.content))
    assert _wait_gone(sessions) == set()


def _take_and_renew(alias: str, worker: int, start: threading.Barrier | None = None) -> int:
    """Take, renew (the watchdog) and release locks on rows' keys and plain keys, some
    waited for and some given up; return how many were taken."""
    if start is not None:
        start.wait(30)
    taken = 0
    for i in range(6):
        key = f"testapp.book:{i % 2}" if i % 3 else f"plain:{i % 2}"
        try:
            with occupy.lock(
                key, owner=f"w{worker}", ttl=0.9, timeout=2, renew=True, backend=alias
            ):
                # Long enough for a renewal (every ttl / 3); the ttl is long enough that
                # a renewal late by half a second on a loaded machine still finds the lease.
                time.sleep(0.35)
                taken += 1
        except occupy.LockTimeout:
            pass
    return taken


def _sessions_on_the_test_database() -> set[int]:
    """Return the server sessions on the PostgreSQL test database but this one."""
    with connections["postgresql"].cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return {row[0] for row in cursor.fetchall()}


def test_threads_and_processes_leave_no_session_for_the_drop(alias: str) -> None:
    """What a user's suite of lock tests does (threads and processes taking and renewing
    locks on rows' keys), then what Django does before it drops the test database:
    nothing of theirs may be left on it. Before, each thread whose first lock on a
    model's key looked its content type up left Django's connection of that thread open
    (Django closes connections at the end of requests only, and a dead thread's at the
    garbage collector's whim): ``DROP DATABASE`` failed with "There is 1 other session
    using the database"."""
    from django.contrib.contenttypes.models import ContentType

    before = _sessions_on_the_test_database()
    ContentType.objects.clear_cache()  # as after a test database's flush
    start = threading.Barrier(4)
    # The processes take their locks while the threads take theirs, not after them.
    workers = multiproc.start(_take_and_renew, [(alias, 10 + n) for n in range(2)])
    with ThreadPoolExecutor(4) as pool:
        taken = list(pool.map(lambda n: _take_and_renew(alias, n, start), range(4)))
    taken += multiproc.collect(workers)
    assert sum(taken) > 0
    # What Django does before it drops a (test) database.
    with connections["postgresql"]._nodb_cursor() as cursor:
        cursor.execute("SELECT 1")
    left = _sessions_on_the_test_database() - before
    deadline = time.monotonic() + GONE_WITHIN
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _sessions_on_the_test_database() - before
    assert left == set(), _describe(left)


def _describe(sessions: set[int]) -> list[tuple[object, ...]]:
    with connections["postgresql"].cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_type, state, left(query, 100) FROM pg_stat_activity "
            "WHERE pid = ANY(%s)",
            [list(sessions)],
        )
        return cursor.fetchall()
