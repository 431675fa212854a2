"""A grant whose reply is lost with its connection is found by its token, never run twice.

The backend retries a statement after a dropped connection. A grant may have committed
before the connection died: run again blindly, it would re-enter the caller's own fresh
claim (one ``acquire()`` at depth 2, whose one ``release()`` leaves the key held). Here the
connection is cut right after the server committed the statement, before its reply is
read. SQLite has no connection to lose.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import OperationalError

import occupy
from occupy.backends import get_backend
from tests.support.aliases import DATABASE_BACKENDS, backend_params
from tests.support.waiting import wait_for_waiters


@pytest.fixture(params=backend_params(DATABASE_BACKENDS))
def alias(request: pytest.FixtureRequest, live_db: None) -> str:
    if get_backend(request.param).store.dialect.vendor == "sqlite":
        pytest.skip("SQLite has no connection that could drop")
    return request.param


class _LosingCursor:
    """A cursor that runs a statement and, if it changed a row, drops the connection
    before the reply is read."""

    def __init__(self, conn: Any, cursor: Any, armed: list[str]) -> None:
        self.conn = conn
        self.wrapped = cursor
        self.cursor = cursor.cursor
        self.armed = armed

    def execute(self, sql: str, params: Any) -> None:
        self.wrapped.execute(sql, params)  # committed: the backend's connection autocommits
        if self.cursor.rowcount > 0:
            self.armed.clear()
            self.conn.connection.close()
            raise OperationalError("server closed the connection unexpectedly (test)")


@pytest.fixture
def lose_reply(alias: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Arm the backend to lose the reply of the next run of a statement that changes
    a row."""
    backend = get_backend(alias)
    armed: list[str] = []
    running = threading.local()  # the statement this thread runs next
    cursor_of = backend.store.own_connections.cursor

    def cursor(own: Any) -> Any:
        real = cursor_of(own)
        if armed and getattr(running, "sql", None) == armed[0]:
            return _LosingCursor(own.wrapper, real, armed)
        return real

    execute = backend.store.execute

    def tracking(sql: str, params: Any, **kwargs: Any) -> Any:
        running.sql = sql
        return execute(sql, params, **kwargs)

    monkeypatch.setattr(backend.store.own_connections, "cursor", cursor)
    monkeypatch.setattr(backend.store, "execute", tracking)
    yield armed.append
    assert not armed, "the statement whose reply was to be lost never ran"


def test_a_grant_whose_reply_was_lost_is_one_level(alias: str, lose_reply) -> None:
    backend = get_backend(alias)
    lose_reply(backend.store.dialect.grant_if_free())
    lease = occupy.acquire("lost:1", owner="alice", ttl=30, timeout=0, backend=alias)
    assert lease.depth == 1
    occupy.release(lease)
    assert occupy.holder("lost:1", backend=alias) is None


def test_a_promotion_whose_reply_was_lost_is_kept(alias: str, lose_reply) -> None:
    backend = get_backend(alias)
    holder = occupy.acquire("lost:2", owner="alice", ttl=30, timeout=0, backend=alias)
    got: list[Any] = []

    def wait() -> None:
        try:
            got.append(occupy.acquire("lost:2", owner="bob", ttl=30, timeout=2, backend=alias))
        except BaseException as e:  # reported by the main thread
            got.append(e)

    waiter = threading.Thread(target=wait)
    dialect = backend.store.dialect
    # The waiter's thread: the same backend. (Where waiters are woken, every promotion
    # waits for a release in flight.)
    lose_reply(dialect.promote_when_released() if dialect.wakes_waiters else dialect.promote())
    waiter.start()
    wait_for_waiters(alias, "lost:2")
    occupy.release(holder)
    waiter.join(10)
    assert got and isinstance(got[0], occupy.Lease), got
    lease = got[0]
    assert lease.depth == 1 and lease.fence > holder.fence
    assert occupy.holder("lost:2", backend=alias).owner == "bob"
    occupy.release(lease)
    assert occupy.holder("lost:2", backend=alias) is None


def test_a_queued_claim_whose_reply_was_lost_is_not_queued_twice(alias: str, lose_reply) -> None:
    # A second pending claim of the waiter's would stand first in line, unheard, until
    # PENDING_TTL (10 s) passed, and keep the waiter itself from its turn.
    backend = get_backend(alias)
    holder = occupy.acquire("lost:3", owner="alice", ttl=30, timeout=0, backend=alias)
    lose_reply(backend.store.dialect.enqueue())
    got: list[occupy.Lease] = []
    waiter = threading.Thread(
        target=lambda: got.append(
            occupy.acquire("lost:3", owner="bob", ttl=30, timeout=3, backend=alias)
        )
    )
    waiter.start()
    wait_for_waiters(alias, "lost:3")
    occupy.release(holder)
    waiter.join(10)
    assert got, "the waiter was not served within its timeout"
    lease = got[0]
    assert [(c.owner, c.state) for c in backend.claims()] == [("bob", "using")]
    occupy.release(lease)
    assert list(backend.claims()) == []


def test_an_unwind_whose_reply_was_lost_takes_one_level(alias: str, lose_reply) -> None:
    """Run again blindly, the undoing of an inner level found the depth already down and
    deleted the claim: the outer holder, still inside its section, lost the key."""
    backend = get_backend(alias)
    outer = occupy.acquire("lost:4", owner="alice", ttl=30, timeout=0, backend=alias)
    inner = occupy.acquire("lost:4", owner="alice", ttl=30, timeout=0, backend=alias)
    assert inner.depth == 2
    lose_reply(backend.store.dialect.unwind())
    occupy.release(inner)
    assert occupy.holder("lost:4", backend=alias).owner == "alice"
    outer.ensure_held()
    occupy.release(outer)
    assert occupy.holder("lost:4", backend=alias) is None
