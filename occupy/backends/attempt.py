"""One caller's try to take a key: :class:`Attempt`, what a backend's
:meth:`~occupy.backends.base.BaseBackend.attempt` returns and
:meth:`~occupy.backends.base.BaseBackend.acquire` drives.

``acquire`` asks the attempt to ``try_acquire()`` (the fast path), and if the key is
held and the caller may wait, to ``enqueue()`` (join the queue, for first-come-first-
served order), then alternates ``wait()`` (block until woken or a short poll passes)
and ``try_acquire()`` until it is granted or the deadline passes. Whatever fails,
``cancel()`` removes every trace of the attempt.

This module does not import :mod:`occupy.backends.base` (which imports it): an attempt
asks its backend through :class:`AttemptBackend`, the few calls the base class makes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from datetime import datetime
from typing import Any, Protocol

from occupy.backends.pacing import Pacing
from occupy.exceptions import LeaseLost, StoreUnavailable
from occupy.leases import Holder, Lease, new_token

__all__ = ["STORE_GRACE", "Attempt", "AttemptBackend"]

#: How far a store call may run past the caller's deadline: a ``timeout`` of 0 still
#: allows a round trip. A grant that comes back later than this is given back.
STORE_GRACE = 1.0


class AttemptBackend(Protocol):
    """What an :class:`Attempt` asks of the backend that made it (a
    :class:`~occupy.backends.base.BaseBackend`); a backend's own attempt class
    declares its backend's class for the rest."""

    @property
    def alias(self) -> str:
        """The backend's alias in ``OCCUPY["BACKENDS"]``."""

    def make_lease(
        self,
        key: str,
        *,
        owner: str,
        token: str,
        fence: int,
        expires_at: datetime,
        ttl: float,
        depth: int = 1,
    ) -> Lease:
        """Return the lease for a grant this backend made."""

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` now, or ``None``."""

    def release(self, lease: Lease) -> None:
        """Undo one level of ``lease``."""

    def unavailable(self, key: str | None, error: BaseException) -> StoreUnavailable:
        """Return the error for a store that failed while occupy worked on ``key``."""

    def reaching(self, key: str | None) -> AbstractContextManager[None]:
        """Raise the store's errors from inside the block as ``StoreUnavailable``."""


class Attempt(Pacing):
    """One caller's try to take ``key``; built by
    :meth:`~occupy.backends.base.BaseBackend.attempt`.

    Backends override :meth:`try_acquire` and :meth:`cancel`, and where they can do
    better than polling, :meth:`enqueue` and :meth:`wait`. Calls on one attempt are
    serialized, so a cancellation never overtakes a grant that is still in flight
    (an async caller cancelled while its worker thread is mid-statement).
    """

    #: Set by ``aacquire``: the attempt's calls run on pool threads between awaits, so a
    #: backend must not park per-connection state (a LISTEN) it cannot see again.
    asynchronous = False
    #: The last lease a serialized try or enqueue produced (see :meth:`abandon`).
    unheard: Lease | None = None
    #: When the caller stops waiting (``time.monotonic()``), or ``None``: a backend
    #: bounds its store calls by it (see :meth:`time_left`).
    deadline: float | None = None

    def __init__(self, backend: AttemptBackend, key: str, owner: str, ttl: float) -> None:
        self.backend = backend
        self.key = key
        self.owner = owner
        self.ttl = ttl
        self.token = new_token()
        self.mutex = threading.Lock()

    def time_left(self) -> float | None:
        """Return how long the next store call may take: the time left before the
        deadline, at least :data:`STORE_GRACE`; ``None`` when the caller waits forever."""
        if self.deadline is None:
            return None
        return max(self.deadline - time.monotonic(), STORE_GRACE)

    def out_of_time(self) -> bool:
        """Return whether the caller's deadline has passed (never when it waits forever):
        a failure that a backend would take as "try again" is then the call's end."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    # --- what a backend writes -------------------------------------------------
    def try_acquire(self) -> Lease | None:
        """Take the key now if the caller may have it; return ``None`` if not."""
        raise NotImplementedError("subclasses of Attempt must provide a try_acquire() method")

    def cancel(self) -> None:
        """Remove every claim this attempt made (queued or granted)."""
        raise NotImplementedError("subclasses of Attempt must provide a cancel() method")

    def enqueue(self) -> Lease | None:
        """Join the key's queue of waiters, so they are served in arrival order.

        Return a lease if joining granted the key at once (it came free meanwhile); the
        caller then has it and must not cancel.
        """
        return None

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the key's holder and the seconds left on its lease by the store's
        clock, for the error's ``retry_after``. The default asks the backend's
        ``holder()`` and knows no seconds left: a backend overrides it to give them."""
        return self.backend.holder(self.key), None

    def wait(self, seconds: float) -> None:
        """Block until the key may be free or ``seconds`` pass (default: sleep)."""
        time.sleep(seconds)

    async def await_wake(self, seconds: float) -> None:
        """Async twin of :meth:`wait` (default: ``asyncio.sleep``)."""
        await asyncio.sleep(seconds)

    # --- serialized entry points used by BaseBackend ------------------------------
    def _locked(self, method: Callable[[], Any]) -> Any:
        with self.mutex:
            result = method()
            if isinstance(result, Lease):
                self.unheard = result
            return result

    def abandon(self) -> None:
        """Give the attempt up for a caller that will not take a lease any more.

        A grant that a try made after its async caller was cancelled (its thread ran on)
        is released like any lease: by its token, so nobody else's claim is touched.
        Every backend leaves its queue
        when it grants, so nothing else is left. Otherwise :meth:`cancel`.
        """
        lease, self.unheard = self.unheard, None
        if lease is None:
            self.cancel()
            return
        with suppress(LeaseLost):  # it expired meanwhile: nothing is held
            self.backend.release(lease)
