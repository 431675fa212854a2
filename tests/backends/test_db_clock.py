"""Claims are read by the clock they expire by, whatever time zone the reading
connection's session is in.

MySQL's ``CURRENT_TIMESTAMP`` (Django's ``Now()``) is in the session's time zone, while
the backend writes and expires claims by ``UTC_TIMESTAMP()``: read through ``Now()``, a
live claim looks expired east of UTC and an expired one looks live west of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from django.db import connections

import occupy
from occupy.backends import get_backend
from tests.support.aliases import backend_params

pytestmark = pytest.mark.parametrize("alias", backend_params(["db-mysql"]))


@pytest.fixture
def session_zone(live_db: None) -> Iterator[Callable[[str, str], None]]:
    """Set the session time zone of a Django connection; put it back afterwards."""
    changed = []

    def set_zone(database: str, zone: str) -> None:
        with connections[database].cursor() as cursor:
            cursor.execute("SET time_zone = %s", [zone])
        changed.append(database)

    yield set_zone
    for database in changed:
        with connections[database].cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")


@pytest.mark.parametrize("zone", ["+05:00", "-05:00"])
def test_list_locks_reads_claims_by_the_clock_they_expire_by(
    alias: str, zone: str, session_zone
) -> None:
    backend = get_backend(alias)
    live = occupy.acquire("clock:live", owner="alice", ttl=60, backend=alias)
    gone = occupy.acquire("clock:gone", owner="bob", ttl=0.05, backend=alias)
    time.sleep(0.2)
    session_zone(backend.database, zone)
    assert [(c.key, c.owner) for c in backend.claims()] == [("clock:live", "alice")]
    occupy.release(live)
    with pytest.raises(occupy.LeaseLost):
        occupy.release(gone)
