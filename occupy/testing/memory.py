"""``MemoryBackend``: locks in this process's memory, for tests; and the store clock
they keep time by, which a test moves forward (:meth:`StoreClock.advance`) to expire,
renew and sweep leases without sleeping.

It is written the way "Writing a backend" says, and passes the contract suite every
other backend passes: code under test behaves as on a real store, in one process
(like ``LocMemCache``). Expiry, ``holder()``, ``claims()`` and ``sweep()`` read
:data:`clock`; waiting for a key (``timeout``) takes real time, as it does elsewhere.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from occupy.backends.base import DEFAULT_SWEEP_BATCH, Attempt, BaseBackend, Claim
from occupy.backends.options import Option
from occupy.leases import Holder, Lease, new_token

__all__ = ["MemoryAttempt", "MemoryBackend", "StoreClock", "clock"]


class StoreClock:
    """The memory store's clock: this process's time plus an offset a test moves.

    ``advance(seconds)`` makes every memory store see that much more time passed: a
    lease with ``ttl=30`` has expired after ``clock.advance(31)``. ``reset()`` takes
    the offset back (between tests; the pytest plugin and the ``TestCase`` mixin do).
    """

    def __init__(self) -> None:
        self.offset = 0.0
        self._mutex = threading.Lock()

    def now(self) -> float:
        """Return the store's time, in seconds since the epoch."""
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        """Move the store's time ``seconds`` forward; ``ValueError`` for a negative or
        non-finite number (a store's time never goes back)."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise TypeError(f"seconds must be a number, not {type(seconds).__name__}.")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"seconds must be finite and ≥ 0, not {seconds!r}.")
        with self._mutex:
            self.offset += seconds

    def reset(self) -> None:
        """Take the offset back to 0: the store's time is this process's again."""
        with self._mutex:
            self.offset = 0.0


#: The clock every ``MemoryBackend`` of this process keeps time by.
clock = StoreClock()


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


@dataclass
class _Grant:
    token: str
    owner: str
    fence: int
    depth: int
    expires: float
    since: float


class MemoryBackend(BaseBackend):
    """Locks in this process's memory, for tests: a dict guarded by a mutex, fences
    from a per-key counter kept for good, time from :data:`clock`.

    Select it for every alias with one line of settings
    (``OCCUPY = {"BACKENDS": {"default": {"BACKEND": "occupy.testing.MemoryBackend"}}}``),
    or for a test with :func:`occupy.testing.memory_backends` or the ``occupy_memory``
    pytest fixture. ``occupied()``, ``free()`` and ``claim()`` need the database
    backend's rows, and refuse this one.
    """

    expires_by_itself = False  # expired grants stay in the dict until swept

    options_schema = {
        "POLL_INTERVAL": Option(
            float, 0.01, "longest pause between two tries while waiting", positive=True
        ),
    }

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.poll_interval = float(self.options["POLL_INTERVAL"])
        self.mutex = threading.Lock()
        self.grants: dict[str, _Grant] = {}
        self.fences: dict[str, int] = {}

    def clear(self) -> None:
        """Forget every claim (between tests); fences are kept, as a store keeps them."""
        with self.mutex:
            self.grants.clear()

    def _live(self, key: str, now: float) -> _Grant | None:
        grant = self.grants.get(key)
        return grant if grant is not None and grant.expires > now else None

    def _grant(self, key: str, owner: str, token: str, ttl: float, now: float) -> Lease:
        fence = self.fences[key] = self.fences.get(key, 0) + 1
        self.grants[key] = _Grant(token, owner, fence, 1, now + ttl, now)
        return self.make_lease(
            key, owner=owner, token=token, fence=fence, expires_at=_at(now + ttl), ttl=ttl
        )

    def _held(self, lease: Lease, now: float) -> _Grant | None:
        grant = self._live(lease.key, now)
        return grant if grant is not None and grant.token == lease.token else None

    # --- the contract -------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> MemoryAttempt:
        """Return an attempt to take ``key`` (waiters poll)."""
        return MemoryAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Undo one level of ``lease``, by its token."""
        with self.mutex:
            grant = self._held(lease, clock.now())
            if grant is not None:
                grant.depth -= 1
                if grant.depth == 0:
                    del self.grants[lease.key]
                return
        raise lease.mark_lost("it expired or was taken over before its release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the expiry ``ttl`` seconds past now."""
        with self.mutex:
            now = clock.now()
            grant = self._held(lease, now)
            if grant is not None:
                grant.expires = now + ttl
                lease.expires_at = _at(grant.expires)
                return
        raise lease.mark_lost("it expired or was taken over before it was extended")

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key``, one level deeper if asked."""
        with self.mutex:
            now = clock.now()
            grant = self._live(key, now)
            if grant is None or grant.token != token:
                return None
            grant.depth += deeper
            grant.expires = max(grant.expires, now + ttl)
            return self.make_lease(
                key,
                owner=grant.owner,
                token=token,
                fence=grant.fence,
                expires_at=_at(grant.expires),
                ttl=ttl,
                depth=grant.depth,
            )

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now, replacing its holder (only the grant with
        fence ``if_fence``, if given)."""
        with self.mutex:
            now = clock.now()
            previous = self._live(key, now)
            if if_fence is not None and (previous is None or previous.fence != if_fence):
                current = None if previous is None else self._holder(previous)
                remaining = None if previous is None else previous.expires - now
                raise self.takeover_refused(key, if_fence, current, remaining)
            lease = self._grant(key, owner, new_token(), ttl, now)
        return lease, None if previous is None else self._holder(previous)

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` now."""
        with self.mutex:
            grant = self._live(key, clock.now())
        return None if grant is None else self._holder(grant)

    def _holder(self, grant: _Grant) -> Holder:
        return self.make_holder(grant.owner, _at(grant.expires), grant.fence, _at(grant.since))

    def is_held(self, lease: Lease) -> bool:
        """Return whether ``lease``'s token still holds its key."""
        with self.mutex:
            return self._held(lease, clock.now()) is not None

    def claims(self) -> Iterable[Claim]:
        """Return the live claims, by key."""
        with self.mutex:
            now = clock.now()
            live = sorted((key, g) for key, g in self.grants.items() if g.expires > now)
        return [
            Claim(key, g.owner, "using", _at(g.since), _at(g.expires), g.fence) for key, g in live
        ]

    def drop_claim(self, key: str) -> None:
        """Delete the claim on ``key`` behind its holder's back."""
        with self.mutex:
            self.grants.pop(key, None)

    def sweep(
        self,
        *,
        batch_size: int = DEFAULT_SWEEP_BATCH,
        dry_run: bool = False,
        removed: Callable[[str], None] | None = None,
    ) -> int:
        """Delete expired claims; return how many."""
        with self.mutex:
            now = clock.now()
            expired = [key for key, g in self.grants.items() if g.expires <= now]
            if not dry_run:
                for key in expired:
                    del self.grants[key]
        if removed is not None:
            for key in expired:
                removed(key)
        return len(expired)


class MemoryAttempt(Attempt):
    """One try at a key: take it if nobody holds it."""

    def __init__(self, backend: MemoryBackend, key: str, owner: str, ttl: float) -> None:
        super().__init__(backend, key, owner, ttl)
        self.memory = backend
        self.max_delay = backend.poll_interval

    def try_acquire(self) -> Lease | None:
        """Grant the key if it is free."""
        with self.memory.mutex:
            now = clock.now()
            if self.memory._live(self.key, now) is not None:
                return None
            return self.memory._grant(self.key, self.owner, self.token, self.ttl, now)

    def cancel(self) -> None:
        """Nothing to remove: a try that did not grant left nothing behind."""

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder and the seconds left on its lease (for ``retry_after``)."""
        with self.memory.mutex:
            now = clock.now()
            grant = self.memory._live(self.key, now)
        if grant is None:
            return None, None
        return self.memory._holder(grant), grant.expires - now
