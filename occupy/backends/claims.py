"""What the cache (on its ``add`` path) and file backends store for a granted key, their
clock helpers, and what the backends share: the key digest keys are stored under, and
the owner shown for a claim occupy did not write.

Times are integer microseconds since the epoch, so that an expiry written by one call
and read back by another converts to the very same ``datetime``.
"""

from __future__ import annotations

import hashlib
import time
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

__all__ = ["UNKNOWN_OWNER", "Entry", "digest", "from_us", "now_us"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: The owner shown (by ``holder()``, ``list_locks``, ``Occupied``) for a claim that
#: occupy did not write or cannot read: an older layout during a rolling deploy,
#: another app's value under a shared prefix, a file torn by a power cut. Such a
#: claim is held by this unknown holder, never free.
UNKNOWN_OWNER = "(unknown)"


class Entry(NamedTuple):
    """A granted claim: who holds ``key``, with which token and fence, until when."""

    token: str
    owner: str
    fence: int
    depth: int
    expires_us: int
    since_us: int
    key: str

    def live(self, now: int) -> bool:
        """Return whether the claim is unexpired at ``now`` (microseconds)."""
        return self.expires_us > now


def digest(key: str) -> str:
    """Return the SHA-256 hex digest a key is stored under (safe in file and cache names,
    the database's lookup column, Redis's hash tag)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def now_us() -> int:
    """Return this host's clock in microseconds since the epoch."""
    return time.time_ns() // 1000


def from_us(us: int) -> datetime:
    """Return microseconds since the epoch as an aware UTC ``datetime``, exactly."""
    return _EPOCH + timedelta(microseconds=us)
