"""The contract every occupy backend implements, and the generic work around it.

A backend is built once per alias from ``OCCUPY["BACKENDS"][alias]``. It writes the
methods in the blocks marked *the contract*: :meth:`BaseBackend.attempt` here, the calls
on a lease or a key in :class:`~occupy.backends.contract.BackendContract` (its base
class, which the attempts stand on); everything else (the waiting loop, its async twin,
cancellation, the errors) is done here and there, once, for every backend.

Taking a lock is an :class:`Attempt`: one caller's try at one key with one token.
``BaseBackend.acquire`` asks the attempt to ``try_acquire()`` (the fast path), and if
the key is held and the caller may wait, to ``enqueue()`` (join the queue, for
first-come-first-served order), then alternates ``wait()`` (block until woken or a
short poll passes) and ``try_acquire()`` until it is granted or the deadline passes.
Whatever fails, ``cancel()`` removes every trace of the attempt.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from asgiref.sync import sync_to_async

from occupy import telemetry
from occupy.backends.cleanup import chain_beneath, clean_up_after
from occupy.backends.configuration import store_reason
from occupy.backends.contract import DEFAULT_SWEEP_BATCH, MAX_SWEEP_BATCH, BackendContract
from occupy.backends.outcomes import occupied
from occupy.backends.pacing import Pacing
from occupy.backends.rows import Claim, OccupationRows
from occupy.exceptions import LeaseLost, LockTimeout, Occupied, OccupyError
from occupy.leases import Holder, Lease, new_token

__all__ = [
    "DEFAULT_SWEEP_BATCH",
    "MAX_SWEEP_BATCH",
    "STORE_GRACE",
    "Attempt",
    "BackendContract",
    "BaseBackend",
    "Claim",
    "OccupationRows",
    "store_reason",
]

#: How far a store call may run past the caller's deadline: a ``timeout`` of 0 still
#: allows a round trip. A grant that comes back later than this is given back.
STORE_GRACE = 1.0


class Attempt(Pacing):
    """One caller's try to take ``key``; built by :meth:`BaseBackend.attempt`.

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

    def __init__(self, backend: BaseBackend, key: str, owner: str, ttl: float) -> None:
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
        clock, for the error's ``retry_after``. The default asks :meth:`BaseBackend.holder`
        and knows no seconds left: a backend overrides it to give them."""
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


class BaseBackend(BackendContract):
    """Base class of the lock stores: the whole of what occupy asks of one.

    A backend is configured as ``OCCUPY["BACKENDS"][alias]``: ``BACKEND`` (this class's
    dotted path), ``LOCATION`` where the store needs one, and ``OPTIONS`` as declared in
    :attr:`options_schema`. Nothing outside ``occupy.backends`` asks which class a
    backend is: what differs is declared here (the options, :meth:`check`,
    :meth:`occupation_rows`) and written in the contract block, which with the rest of
    the calls on a lease or a key is in :class:`~occupy.backends.contract.BackendContract`.
    """

    # --- the contract: each backend writes this (and BackendContract's block) ------------
    def attempt(self, key: str, owner: str, ttl: float) -> Attempt:
        """Return an :class:`Attempt` to take ``key`` for ``owner`` for ``ttl`` seconds."""
        raise NotImplementedError("subclasses of BaseBackend must provide an attempt() method")

    # --- generic work ----------------------------------------------------------------
    def acquire(self, key: str, *, owner: str, ttl: float, timeout: float | None) -> Lease:
        """Take ``key``, waiting at most ``timeout`` seconds (``None``: forever)."""
        # One thread makes every call on this attempt, so they need no mutex.
        attempt = self.attempt(key, owner, ttl)
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt.deadline = deadline
        try:
            lease = attempt.try_acquire()
            if lease is None and timeout != 0:
                telemetry.began_waiting()
                lease = attempt.enqueue()
                while lease is None and (remaining := _left(deadline)) > 0:
                    attempt.wait(_pause(attempt, remaining))
                    lease = attempt.try_acquire()
            if lease is None:
                raise self._occupied(attempt, waited=timeout)
            self._in_time(lease, deadline, timeout)
            return lease
        except BaseException as error:
            clean_up_after(error, attempt.cancel)
            raise

    async def aacquire(self, key: str, *, owner: str, ttl: float, timeout: float | None) -> Lease:
        """Async twin of :meth:`acquire`; cancelling it leaves no claim behind."""
        attempt = self.attempt(key, owner, ttl)
        attempt.asynchronous = True
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt.deadline = deadline
        run = _in_thread(attempt)
        try:
            lease = await run(attempt.try_acquire)
            if lease is None and timeout != 0:
                telemetry.began_waiting()
                lease = await run(attempt.enqueue)
                while lease is None and (remaining := _left(deadline)) > 0:
                    await attempt.await_wake(_pause(attempt, remaining))
                    lease = await run(attempt.try_acquire)
            if lease is None:
                raise await sync_to_async(self._occupied, thread_sensitive=False)(
                    attempt, waited=timeout
                )
            assert isinstance(lease, Lease)  # what try_acquire and enqueue return
            self._in_time(lease, deadline, timeout, give_back=False)
            return lease
        except BaseException as error:
            try:
                # Shielded: a cancelled caller must still remove its claim; the mutex
                # makes this wait for a try that is still running in its thread.
                await asyncio.shield(run(attempt.abandon))
            except Exception as failed:
                chain_beneath(error, failed)
            raise

    def _in_time(
        self, lease: Lease, deadline: float | None, timeout: float | None, *, give_back: bool = True
    ) -> None:
        """Give back a lease the store granted after the caller's deadline (a stalled
        store) and raise ``LockTimeout``: the caller stopped waiting, and must not
        start work late under a lease whose expiry it did not plan for. (``aacquire``
        gives it back through :meth:`Attempt.abandon`.)"""
        if deadline is None or time.monotonic() <= deadline + STORE_GRACE:
            return
        if give_back:
            with suppress(OccupyError):  # not held any more, or the store failed: it expires
                self.release(lease)
        raise LockTimeout(
            f"{lease.key!r} was granted only after the timeout of {timeout:g} s had "
            "passed (the lock store was slow to answer); it was given back.",
            key=lease.key,
        )

    def _occupied(self, attempt: Attempt, *, waited: float | None) -> Occupied:
        holder, remaining = attempt.current_holder()
        return occupied(attempt.key, holder, remaining, waited=waited)


def _left(deadline: float | None) -> float:
    """Return the seconds left before ``deadline`` (always infinity when ``None``)."""
    return math.inf if deadline is None else deadline - time.monotonic()


def _pause(attempt: Attempt, remaining: float) -> float:
    return min(attempt.next_delay(), remaining)


def _in_thread(attempt: Attempt) -> Callable[[Callable[[], Any]], Any]:
    """Return how ``aacquire`` runs one of ``attempt``'s methods (a bound method): in a
    worker thread, serialized with the attempt's other calls."""

    def call(method: Callable[[], Any]) -> Any:
        return sync_to_async(attempt._locked, thread_sensitive=False)(method)

    return call
