"""Leases from the database backend carry the right expiry whatever ``USE_TZ`` and
``TIME_ZONE`` say.

With ``USE_TZ = False`` Django puts a PostgreSQL session in ``TIME_ZONE`` and reads
``timestamptz`` values as naive local times; labelled UTC, they were off by the zone's
offset (New York: five hours early, Kolkata: five and a half hours late).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from django.test import override_settings

import occupy
from occupy.backends import reset_backends
from tests.support.aliases import DATABASE_BACKENDS, backend_params


@pytest.fixture(params=backend_params(DATABASE_BACKENDS))
def alias(request: pytest.FixtureRequest, live_db: None) -> str:
    return request.param


@pytest.fixture(
    params=[(False, "America/New_York"), (False, "Asia/Kolkata"), (True, "America/New_York")],
    ids=["naive-new-york", "naive-kolkata", "aware-new-york"],
)
def zone(request: pytest.FixtureRequest) -> Iterator[None]:
    """Run with ``USE_TZ`` and ``TIME_ZONE`` as given, on backends built for them."""
    use_tz, time_zone = request.param
    reset_backends()
    with override_settings(USE_TZ=use_tz, TIME_ZONE=time_zone):
        yield
        reset_backends()
    reset_backends()


def _off(moment: datetime, ttl: float) -> float:
    """Return how far ``moment`` is from ``ttl`` seconds after now, in seconds."""
    assert moment.tzinfo is not None
    return abs((moment - datetime.now(timezone.utc)).total_seconds() - ttl)


def test_expiry_is_utc_under_every_time_zone_setting(alias: str, zone: None) -> None:
    lease = occupy.acquire("tz:1", owner="alice", ttl=30, timeout=0, backend=alias)
    assert _off(lease.expires_at, 30) < 5, lease.expires_at
    holder = occupy.holder("tz:1", backend=alias)
    assert holder is not None and _off(holder.expires_at, 30) < 5, holder
    lease.extend(60)
    assert _off(lease.expires_at, 60) < 5, lease.expires_at
    occupy.release(lease)
