"""Rows in the claims table that occupy did not write: a claim that says it lives far
longer than any ttl occupy allows blocks nothing, and what blocks a key is what
``holder()`` reports; takeover and ``sweep_locks`` clear such rows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import call_command

import occupy
from occupy.backends import get_backend
from occupy.backends.claims import digest
from occupy.validation import MAX_TTL
from tests.support.aliases import DATABASE_BACKENDS, backend_params

pytestmark = pytest.mark.parametrize("alias", backend_params(DATABASE_BACKENDS))

FAR = datetime(9999, 1, 1, tzinfo=timezone.utc)


def _plant(alias: str, key: str, state: str, expires_at: datetime) -> None:
    from occupy.models import Occupation

    backend = get_backend(alias)
    Occupation.objects.using(backend.database).create(
        key=key,
        digest=digest(key),
        slot=digest(key) if state == "using" else None,
        owner="planted",
        token="p" * 32,
        state=state,
        fence=1 if state == "using" else None,
        depth=1,
        expires_at=expires_at,
        created_at=datetime.now(timezone.utc),
    )


def _rows(alias: str) -> int:
    from occupy.models import Occupation

    return Occupation.objects.using(get_backend(alias).database).count()


@pytest.mark.parametrize("state", ["pending", "using"])
def test_a_claim_beyond_the_longest_ttl_blocks_nothing(
    alias: str, live_db: None, state: str
) -> None:
    # Before, a pending row expiring in 9999 made every acquire say "held" for ever
    # while holder() said nobody held the key; takeover and sweep_locks kept it.
    _plant(alias, "k", state, FAR)
    assert occupy.holder("k", backend=alias) is None
    assert [c for c in get_backend(alias).claims() if c.key == "k"] == []
    lease = occupy.acquire("k", owner="alice", ttl=30, timeout=0, backend=alias)
    assert occupy.holder("k", backend=alias).owner == "alice"
    occupy.release(lease)
    assert get_backend(alias).sweep() == (1 if state == "pending" else 0)  # the grant
    assert _rows(alias) == 0  # purged a planted holder; a sweep, a planted waiter


def test_takeover_and_sweep_clear_a_claim_beyond_the_longest_ttl(alias: str, live_db: None) -> None:
    _plant(alias, "k", "pending", FAR)
    lease = occupy.takeover("k", owner="bob", ttl=30, backend=alias)
    assert occupy.holder("k", backend=alias).owner == "bob"
    occupy.release(lease)
    occupy.release(occupy.acquire("k", owner="carol", ttl=30, timeout=0, backend=alias))
    _plant(alias, "k", "pending", FAR)
    _plant(alias, "other", "using", FAR)
    assert get_backend(alias).sweep(dry_run=True) == 2
    call_command("sweep_locks", backend=[alias], verbosity=0)
    assert _rows(alias) == 0


def test_a_claim_within_the_longest_ttl_is_held_and_reported(alias: str, live_db: None) -> None:
    # A using row occupy could have written (a lease of almost ten years) is held.
    _plant(alias, "k", "using", datetime.now(timezone.utc) + timedelta(seconds=MAX_TTL - 3600))
    holder = occupy.holder("k", backend=alias)
    assert holder is not None and holder.owner == "planted"
    with pytest.raises(occupy.Occupied) as info:
        occupy.acquire("k", owner="alice", timeout=0, backend=alias)
    assert info.value.holder.owner == "planted"
    lease = occupy.takeover("k", owner="bob", ttl=30, backend=alias)
    assert occupy.holder("k", backend=alias).owner == "bob"
    occupy.release(lease)


# --- fences -----------------------------------------------------------------------------
def _plant_fence(alias: str, key: str, state: str, fence: int, expires_at: datetime) -> None:
    from occupy.models import Occupation

    backend = get_backend(alias)
    Occupation.objects.using(backend.database).create(
        key=key,
        digest=digest(key),
        slot=digest(key) if state == "using" else None,
        owner="planted",
        token="q" * 32,
        state=state,
        fence=fence,
        depth=1,
        expires_at=expires_at,
        created_at=datetime.now(timezone.utc),
    )


@pytest.mark.parametrize("state", ["using", "pending"])
@pytest.mark.parametrize("expired", [False, True], ids=["live", "expired"])
def test_a_recorded_fence_of_2_63_minus_1_is_refused_by_name(
    alias: str, live_db: None, state: str, expired: bool
) -> None:
    """Before: "bigint out of range" on PostgreSQL, a duplicate (inexact float) fence on
    SQLite, an IntegrityError that escaped on MariaDB."""
    now = datetime.now(timezone.utc)
    _plant_fence(
        alias,
        "k",
        state,
        2**63 - 1,
        now - timedelta(seconds=5) if expired else now + timedelta(seconds=60),
    )
    for call in (
        lambda: occupy.acquire("k", owner="a", ttl=30, timeout=0, backend=alias),
        lambda: occupy.acquire("k", owner="a", ttl=30, timeout=0.3, backend=alias),
        lambda: occupy.takeover("k", owner="b", ttl=30, backend=alias),
    ):
        with pytest.raises(occupy.StoreUnavailable) as info:
            call()
        message = str(info.value)
        assert info.value.key == "k" and str(2**63 - 1) in message
        assert "sweep_locks" in message and "DELETE FROM" in message
    assert all(c.fence is None or c.fence == 2**63 - 1 for c in get_backend(alias).claims())
    if expired:  # the repair: sweep_locks removes it
        assert get_backend(alias).sweep() >= 1
    else:
        from occupy.models import Occupation

        Occupation.objects.using(get_backend(alias).database).filter(key="k").delete()
    lease = occupy.acquire("k", owner="c", ttl=30, timeout=0, backend=alias)
    assert 0 < lease.fence < 2**63 - 1
    occupy.release(lease)


def test_a_waiter_behind_a_fence_that_cannot_rise_is_told_why(alias: str, live_db: None) -> None:
    # The holder's claim carries the last fence; when it expires, the waiter cannot be
    # promoted (no higher fence) and learns why at its timeout.
    _plant_fence(
        alias, "k", "using", 2**63 - 1, datetime.now(timezone.utc) + timedelta(seconds=0.3)
    )
    with pytest.raises(occupy.StoreUnavailable, match=str(2**63 - 1)):
        occupy.acquire("k", owner="a", ttl=30, timeout=1, backend=alias)


def test_fences_just_below_the_limit_rise_exactly(alias: str, live_db: None) -> None:
    _plant_fence(
        alias, "k", "pending", 2**63 - 3, datetime.now(timezone.utc) + timedelta(seconds=60)
    )
    taken = occupy.takeover("k", owner="a", ttl=30, backend=alias)
    assert taken.fence == 2**63 - 2
    again = occupy.takeover("k", owner="b", ttl=30, backend=alias)
    assert again.fence == 2**63 - 1
    with pytest.raises(occupy.StoreUnavailable, match="cannot exceed"):
        occupy.takeover("k", owner="c", ttl=30, backend=alias)
    assert occupy.holder("k", backend=alias).fence == 2**63 - 1
    occupy.release(again)
