"""``AddCacheBackend``: the cache backend on a cache without the Redis protocol.

Every operation is one of :class:`~.store.CacheStore`'s, whose module docstring states
what this path guarantees and what it cannot (``add`` to take a key, a read, a compare
and a write within a safety margin to release or extend; waiters poll).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from occupy.backends.base import Attempt, BaseBackend, Claim
from occupy.backends.cache.backend import CacheBackend
from occupy.backends.cache.store import CacheStore, Outcome
from occupy.backends.claims import Entry, from_us
from occupy.leases import Holder, Lease, new_token

__all__ = ["AddCacheBackend", "CacheAttempt"]

logger = logging.getLogger("occupy.backends.cache")


class AddCacheBackend(CacheBackend):
    """Locks on a cache without the Redis protocol: :class:`~.store.CacheStore`'s
    entries, taken with ``add``; waiters poll (see :mod:`.store` for what this path
    guarantees). ``CacheBackend`` builds it for every cache without a raw Redis
    client."""

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.store = CacheStore(self.cache_alias, self.margin)

    def lease(self, key: str, owner: str, ttl: float, entry: Entry) -> Lease:
        """Return the lease for a grant the store made."""
        return self.make_lease(
            key,
            owner=owner,
            token=entry.token,
            fence=entry.fence,
            expires_at=from_us(entry.expires_us),
            ttl=ttl,
            depth=entry.depth,
        )

    def attempt(self, key: str, owner: str, ttl: float) -> CacheAttempt:
        """Return an attempt to take ``key`` (see :class:`CacheAttempt`)."""
        return CacheAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Undo one level of the lease; raise ``LeaseLost`` if it was no longer held."""
        with self.reaching(lease.key):
            depth = self.store.release(lease.key, lease.token, lease.ttl)
        if depth < 0:
            raise lease.mark_lost("it expired or was taken over before release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after this host's now."""
        with self.reaching(lease.key):
            expires = self.store.extend(lease.key, lease.token, ttl)
        if expires is None:
            raise lease.mark_lost("it expired or was taken over before it was extended")
        lease.expires_at = from_us(expires)

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``."""
        with self.reaching(key):
            entry = self.store.resume(key, token, ttl, int(deeper))
        return None if entry is None else self.lease(key, entry.owner, ttl, entry)

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it (only the
        entry with fence ``if_fence``, if given): a read then a write, see
        :meth:`CacheStore.takeover`."""
        with self.reaching(key):
            entry, previous, now = self.store.takeover(key, owner, new_token(), ttl, if_fence)
        holder = None if previous is None else _holder(previous)
        if entry is None:
            assert if_fence is not None  # only a conditional takeover is refused
            raise self.takeover_refused(
                key,
                if_fence,
                holder,
                None if previous is None else (previous.expires_us - now) / 1e6,
            )
        return self.lease(key, owner, ttl, entry), holder

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` (owner, expiry, fence; never the token), or ``None``."""
        with self.reaching(key):
            found = self.store.holder(key)
        return None if found is None else _holder(found[0])

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds its key."""
        with self.reaching(lease.key):
            return self.store.is_held(lease.key, lease.token)

    def claims(self) -> list[Claim]:
        """Return the store's entries as claims: :meth:`CacheStore.entries` refuses
        (``NotImplementedError``), since Django's cache API cannot enumerate keys."""
        with self.reaching(None):
            entries = sorted(self.store.entries(), key=lambda e: e.key)
        return [
            Claim(e.key, e.owner, "using", from_us(e.since_us), from_us(e.expires_us), e.fence)
            for e in entries
        ]


def _holder(entry: Entry) -> Holder:
    return BaseBackend.make_holder(
        entry.owner, from_us(entry.expires_us), entry.fence, since=from_us(entry.since_us)
    )


class CacheAttempt(Attempt):
    """One try at a key on a cache without the Redis protocol: ``add`` each time;
    waiters poll."""

    backend: AddCacheBackend

    def __init__(self, backend: AddCacheBackend, key: str, owner: str, ttl: float) -> None:
        super().__init__(backend, key, owner, ttl)
        self.store = backend.store
        self.max_delay = backend.poll_interval
        self.seen: Outcome | None = None
        self.in_doubt = False

    def try_acquire(self) -> Lease | None:
        """Grant the key if it is free; else remember the holder."""
        self.in_doubt = True  # until the store answers, a grant may have been made
        with self.backend.reaching(self.key):
            outcome = self.store.grant(self.key, self.owner, self.token, self.ttl)
        self.in_doubt = False
        if outcome.granted is not None:
            return self.backend.lease(self.key, self.owner, self.ttl, outcome.granted)
        self.seen = outcome
        return None

    def cancel(self) -> None:
        """Delete a grant this attempt may have made without hearing about it."""
        if not self.in_doubt:
            return
        try:
            self.store.forget(self.key, self.token, self.ttl)
        except Exception:  # the error being raised already says what went wrong
            logger.warning("could not clear a possible grant of %r", self.key, exc_info=True)

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last try saw and its seconds left, for the error."""
        if self.seen is None or self.seen.holder is None:
            with self.backend.reaching(self.key):
                found = self.store.holder(self.key)
            if found is None:
                return None, None
            entry, now = found
        else:
            entry, now = self.seen.holder, self.seen.now_us
        return _holder(entry), max(0.0, (entry.expires_us - now) / 1e6)
