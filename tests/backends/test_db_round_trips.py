"""How many statements the database backend sends for a lease's calls.

A renewal is what the watchdog sends for every watched lease, once per third of its
ttl: where ``UPDATE … RETURNING`` exists (PostgreSQL, SQLite), ``extend`` is that one
``UPDATE``, which returns the new expiry; before, it read the expiry with a ``SELECT``
after (two round trips, as MariaDB still needs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import occupy
from occupy.backends import get_backend
from tests.support.aliases import DATABASE_BACKENDS, backend_params
from tests.support.claims import drop_claim


@pytest.fixture(params=backend_params(DATABASE_BACKENDS))
def alias(request: pytest.FixtureRequest, live_db: None) -> str:
    return request.param


@contextmanager
def statements_sent(alias: str) -> Iterator[list[str]]:
    """Collect the statements the backend sends from this thread inside the block (on
    its own connection, this thread's)."""
    sent: list[str] = []

    def record(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
    ) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with get_backend(alias).store.own_connections.get().wrapper.execute_wrapper(record):
        yield sent


def test_extend_is_one_statement_where_update_returning_exists(alias: str) -> None:
    backend = get_backend(alias)
    lease = occupy.acquire("trips:1", owner="alice", ttl=10, timeout=0, backend=alias)
    before = lease.expires_at
    with statements_sent(alias) as sent:
        lease.extend(60)
    assert len(sent) == (1 if backend.store.dialect.update_returning else 2), sent
    assert sent[0].lstrip().startswith("UPDATE")
    # The expiry the lease was given is the one the database keeps.
    assert lease.expires_at > before
    assert occupy.holder("trips:1", backend=alias).expires_at == lease.expires_at
    occupy.release(lease)


def test_extend_of_a_lost_lease_raises_lease_lost(alias: str) -> None:
    lease = occupy.acquire("trips:2", owner="alice", ttl=10, timeout=0, backend=alias)
    drop_claim(get_backend(alias), "trips:2")
    with statements_sent(alias) as sent, pytest.raises(occupy.LeaseLost):
        lease.extend(60)
    assert len(sent) == 1, sent  # nothing was extended: nothing to read back
