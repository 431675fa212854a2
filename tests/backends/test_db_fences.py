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
    backend.execute(
        "UPDATE occupy_occupation SET fence = fence + %s WHERE slot IS NOT NULL", [AHEAD]
    )
    return occupy.holder(key, using=alias).fence


def test_a_takeover_with_the_clock_behind_is_one_above_the_last_fence(
    alias: str, live_db: None
) -> None:
    occupy.acquire("k", owner="alice", ttl=30, using=alias)
    last = _push_fence_ahead(alias, "k")
    bob = occupy.takeover("k", owner="bob", ttl=30, using=alias)
    assert bob.fence == last + 1
    carol = occupy.takeover("k", owner="carol", ttl=30, using=alias)
    assert carol.fence == bob.fence + 1
    occupy.release(carol)
