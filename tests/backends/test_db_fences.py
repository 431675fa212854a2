"""Database fences when the clock is behind the key's last fence (a clock stepped back):
while the key's claim is there, the next fence is one above it, never equal."""

from __future__ import annotations

import pytest

import occupy
from occupy.backends import get_backend
from tests.support.aliases import DATABASE_BACKENDS, backend_params

pytestmark = pytest.mark.parametrize("alias", backend_params(DATABASE_BACKENDS))

AHEAD = 10**12  # a fence this far ahead of the clock in µs: eleven days


def _push_fence_ahead(alias: str, key: str) -> int:
    backend = get_backend(alias)
    backend.store.execute(
        "UPDATE occupy_occupation SET fence = fence + %s WHERE slot IS NOT NULL", [AHEAD]
    )
    return occupy.holder(key, backend=alias).fence


def test_a_takeover_with_the_clock_behind_is_one_above_the_last_fence(
    alias: str, live_db: None
) -> None:
    occupy.acquire("k", owner="alice", ttl=30, backend=alias)
    last = _push_fence_ahead(alias, "k")
    bob = occupy.takeover("k", owner="bob", ttl=30, backend=alias)
    assert bob.fence == last + 1
    carol = occupy.takeover("k", owner="carol", ttl=30, backend=alias)
    assert carol.fence == bob.fence + 1
    occupy.release(carol)


#: A statement that waits 0.3 s before it computes its select list, and the time it began.
WAITED = {
    "postgresql": (
        "FROM (SELECT pg_sleep(0.3)) AS waited",
        "(extract(epoch from statement_timestamp()) * 1000000)::bigint",
    ),
    "mysql": (
        "FROM DUAL WHERE SLEEP(0.3) = 0",
        "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
    ),
}


def test_a_fences_clock_is_when_the_row_is_written_not_when_its_statement_began(
    alias: str, live_db: None
) -> None:
    """A grant whose statement waited for a row lock while another grant of the key was
    made and released (its rows gone) must not take the time its statement began as its
    fence's floor: that is below the fence just handed out. (MariaDB's
    ``UTC_TIMESTAMP`` is the statement's start; the fault soak caught a read refused
    35 ms after its acquire.)"""
    backend = get_backend(alias)
    if backend.store.dialect.vendor not in WAITED:
        pytest.skip("SQLite's clock is a Python function, called as the row is written")
    wait, began = WAITED[backend.store.dialect.vendor]
    [(late,)] = backend.store.execute(
        f"SELECT {backend.store.dialect.clock_us} - {began} {wait}", []
    )[1]
    assert int(late) >= 250_000, f"the fence's clock was {int(late)} µs past the start"
    if backend.store.dialect.vendor == "mysql":  # SYSDATE answers in the session's zone
        [(zone,)] = backend.store.execute("SELECT @@session.time_zone", [])[1]
        assert zone == "+00:00"
