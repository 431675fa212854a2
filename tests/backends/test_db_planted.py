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
        key=key, digest=digest(key), slot=digest(key) if state == "using" else None,
        owner="planted", token="p" * 32, state=state, fence=1 if state == "using" else None,
        depth=1, expires_at=expires_at, created_at=datetime.now(timezone.utc))


def _rows(alias: str) -> int:
    from occupy.models import Occupation

    return Occupation.objects.using(get_backend(alias).database).count()


@pytest.mark.parametrize("state", ["pending", "using"])
def test_a_claim_beyond_the_longest_ttl_blocks_nothing(alias: str, live_db: None,
                                                       state: str) -> None:
    # Before, a pending row expiring in 9999 made every acquire say "held" for ever
    # while holder() said nobody held the key; takeover and sweep_locks kept it.
    _plant(alias, "k", state, FAR)
    assert occupy.holder("k", using=alias) is None
    assert [c for c in get_backend(alias).claims() if c.key == "k"] == []
    lease = occupy.acquire("k", owner="alice", ttl=30, timeout=0, using=alias)
    assert occupy.holder("k", using=alias).owner == "alice"
    occupy.release(lease)
    assert get_backend(alias).sweep() == (1 if state == "pending" else 0)  # the grant
    assert _rows(alias) == 0  # purged a planted holder; a sweep, a planted waiter


def test_takeover_and_sweep_clear_a_claim_beyond_the_longest_ttl(alias: str,
                                                                 live_db: None) -> None:
    _plant(alias, "k", "pending", FAR)
    lease = occupy.takeover("k", owner="bob", ttl=30, using=alias)
    assert occupy.holder("k", using=alias).owner == "bob"
    occupy.release(lease)
    occupy.release(occupy.acquire("k", owner="carol", ttl=30, timeout=0, using=alias))
    _plant(alias, "k", "pending", FAR)
    _plant(alias, "other", "using", FAR)
    assert get_backend(alias).sweep(dry_run=True) == 2
    call_command("sweep_locks", using=[alias], verbosity=0)
    assert _rows(alias) == 0


def test_a_claim_within_the_longest_ttl_is_held_and_reported(alias: str,
                                                              live_db: None) -> None:
    # A using row occupy could have written (a lease of almost ten years) is held.
    _plant(alias, "k", "using", datetime.now(timezone.utc) + timedelta(seconds=MAX_TTL - 3600))
    holder = occupy.holder("k", using=alias)
    assert holder is not None and holder.owner == "planted"
    with pytest.raises(occupy.Occupied) as info:
        occupy.acquire("k", owner="alice", timeout=0, using=alias)
    assert info.value.holder.owner == "planted"
    lease = occupy.takeover("k", owner="bob", ttl=30, using=alias)
    assert occupy.holder("k", using=alias).owner == "bob"
    occupy.release(lease)
