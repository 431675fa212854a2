"""The contract every occupy backend implements, and the generic work around it.

A backend is built once per alias from ``OCCUPY["BACKENDS"][alias]``. It writes the
methods in the block marked *the contract*; everything else (the waiting loop, its
async twin, cancellation, the errors) is done here, once, for every backend.

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
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any, ClassVar

from asgiref.sync import sync_to_async
from django.core.checks import CheckMessage

from occupy import telemetry
from occupy.backends.claims import UNKNOWN_OWNER
from occupy.backends.cleanup import chain_beneath, clean_up_after
from occupy.backends.configuration import (
    ConfiguredBackend,
    store_reason,
    unknown_claims,
    unreachable_store,
)
from occupy.backends.outcomes import make_holder, occupied, takeover_refused, utc
from occupy.backends.pacing import Pacing
from occupy.backends.rows import Claim, OccupationRows
from occupy.exceptions import (
    LeaseLost,
    LockTimeout,
    Occupied,
    OccupyError,
    StoreUnavailable,
)
from occupy.leases import Holder, Lease, new_token

__all__ = [
    "STORE_GRACE",
    "Attempt",
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


class BaseBackend(ConfiguredBackend):
    """Base class of the lock stores: the whole of what occupy asks of one.

    A backend is configured as ``OCCUPY["BACKENDS"][alias]``: ``BACKEND`` (this class's
    dotted path), ``LOCATION`` where the store needs one, and ``OPTIONS`` as declared in
    :attr:`options_schema`. Nothing outside ``occupy.backends`` asks which class a
    backend is: what differs is declared here (the options, :meth:`check`,
    :meth:`occupation_rows`) and written in the contract block.
    """

    #: The errors by which the store's client says it cannot be reached or used
    #: (see :meth:`reaching`).
    store_errors: tuple[type[BaseException], ...] = ()
    #: Whether the store drops expired claims by itself (Redis, caches), so that
    #: ``sweep_locks`` has nothing to do; a backend whose expired claims stay until
    #: swept sets it to False and writes :meth:`sweep`.
    expires_by_itself: ClassVar[bool] = True

    def check_store(self, databases: Collection[str]) -> list[CheckMessage]:
        """Return the check messages that need to read the store (``manage.py check
        --database``, whose aliases are ``databases``): the default finds claims occupy
        did not write (``occupy.W004``) where :meth:`claims` can list them."""
        try:
            found = [c.key for c in self.claims() if c.owner == UNKNOWN_OWNER and c.since is None]
        except NotImplementedError:
            return []
        except Exception as e:  # a store that cannot be read is no reason to stop a check
            return [self.unreachable_store(e)]
        return [unknown_claims(self.alias, found)] if found else []

    def unreachable_store(self, error: BaseException) -> CheckMessage:
        """Return ``occupy.W007``: the store could not be read (``check --database``)."""
        return unreachable_store(self.alias, self.describe_store(), self.store_fix(), error)

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
        """Return the :class:`~occupy.leases.Lease` for a grant this backend made."""
        return Lease(
            key=key,
            owner=owner,
            token=token,
            fence=int(fence),
            expires_at=utc(expires_at),
            ttl=ttl,
            using=self.alias,
            depth=depth,
            backend=self,
        )

    make_holder = staticmethod(make_holder)
    takeover_refused = staticmethod(takeover_refused)

    def occupation_rows(self) -> OccupationRows | None:
        """Return how the model side reads this backend's claims as ``Occupation`` rows,
        or ``None`` (the default) when it keeps them elsewhere."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} alias={self.alias!r}>"

    def unavailable(self, key: str | None, error: BaseException) -> StoreUnavailable:
        """Return the error for a store that failed while occupy worked on ``key``; the
        caller raises it ``from error``."""
        on = "" if key is None else f" while working on {key!r}"
        telemetry.store_error(self, key)
        return StoreUnavailable(
            f"occupy backend {self.alias!r} ({type(self).__name__}) could not use its "
            f"store{on}: {error}",
            key=key,
            using=self.alias,
        )

    @contextmanager
    def reaching(self, key: str | None) -> Iterator[None]:
        """Raise :attr:`store_errors` from inside the block as ``StoreUnavailable``."""
        try:
            yield
        except self.store_errors as e:
            raise self.unavailable(key, e) from e

    # --- the contract: each backend writes these ------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> Attempt:
        """Return an :class:`Attempt` to take ``key`` for ``owner`` for ``ttl`` seconds."""
        raise NotImplementedError("subclasses of BaseBackend must provide an attempt() method")

    def release(self, lease: Lease) -> None:
        """Undo one level of ``lease``; raise ``LeaseLost`` if it was no longer held.

        A late release never touches another holder's claim.
        """
        raise NotImplementedError("subclasses of BaseBackend must provide a release() method")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Set ``lease`` to expire ``ttl`` seconds after the store's now, and update
        ``lease.expires_at``; raise ``LeaseLost`` if it was no longer held."""
        raise NotImplementedError("subclasses of BaseBackend must provide an extend() method")

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease that ``token`` holds on ``key``, or ``None`` if it holds none.

        The store checks the token, in the same step as the write: one level deeper if
        ``deeper`` (re-entry by the context that holds the lease), and the expiry moved
        to ``ttl`` seconds after the store's now unless it is later already (never
        shortened). The lease comes back with the owner, fence and depth the store has.
        A token that holds nothing (forged, expired, taken over) gets ``None`` and
        changes nothing.
        """
        raise NotImplementedError("subclasses of BaseBackend must provide a resume() method")

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now, whoever holds it, and return the new lease and
        the holder it replaced (``None`` if the key was free).

        One store operation replaces the holder and issues a higher fence: the old
        lease's next extend or release finds it lost, and its fenced writes are refused.
        Queued waiters keep their places, behind the new holder.

        With ``if_fence``, the same operation first checks that the key is held, live,
        by the grant whose fence is ``if_fence``; if not, it changes nothing and raises
        :class:`~occupy.exceptions.TakeoverRefused` (see :meth:`takeover_refused`)
        naming the current holder. The holder returned is then that grant.
        """
        raise NotImplementedError("subclasses of BaseBackend must provide a takeover() method")

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` now, or ``None``."""
        raise NotImplementedError("subclasses of BaseBackend must provide a holder() method")

    def is_held(self, lease: Lease) -> bool:
        """Return whether the store still grants ``lease`` (its token, unexpired)."""
        raise NotImplementedError("subclasses of BaseBackend must provide an is_held() method")

    def claims(self) -> Iterable[Claim]:
        """Yield the live claims, for ``list_locks``."""
        raise NotImplementedError("subclasses of BaseBackend must provide a claims() method")

    # --- what a backend may override ---------------------------------------------------
    def sweep(
        self,
        *,
        batch_size: int = 1000,
        dry_run: bool = False,
        removed: Callable[[str], None] | None = None,
    ) -> int:
        """Delete expired claims in batches and return how many (or would be, if dry).
        ``removed``, if given, is called with the key of each claim deleted (or that
        would be): ``sweep_locks -v 2`` lists them.

        The default does nothing and returns 0: for stores that drop expired keys
        themselves (:attr:`expires_by_itself`).
        """
        return 0

    def describe_store(self) -> str:
        """Return the store, as an operator finds it ("database 'default' (PostgreSQL at
        db:5432)"): error messages of the management commands name it."""
        return f"the store of occupy backend {self.alias!r} ({type(self).__name__})"

    def store_fix(self) -> str:
        """Return what an operator checks when the store cannot be used (a clause:
        "check that … answers")."""
        return "check that it answers and that the backend's OPTIONS point at it"

    def close(self) -> None:
        """Release connections and threads this backend holds, in every thread of this
        process (on settings reload, :func:`occupy.backends.close_connections`); the
        backend makes them again when next used."""

    def close_if_unusable_or_obsolete(self) -> None:
        """Close this thread's connections that are unusable or past their age, as
        Django does with its own at the start and end of a request (a backend whose
        connections are its own, not a pool's or a cache's, writes it)."""

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

    async def arelease(self, lease: Lease) -> None:
        """Async twin of :meth:`release`."""
        await sync_to_async(self.release, thread_sensitive=False)(lease)

    async def aextend(self, lease: Lease, ttl: float) -> None:
        """Async twin of :meth:`extend`."""
        await sync_to_async(self.extend, thread_sensitive=False)(lease, ttl)

    async def aresume(
        self, key: str, token: str, ttl: float, *, deeper: bool = True
    ) -> Lease | None:
        """Async twin of :meth:`resume`."""
        return await sync_to_async(self.resume, thread_sensitive=False)(
            key, token, ttl, deeper=deeper
        )

    async def atakeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Async twin of :meth:`takeover`."""
        return await sync_to_async(self.takeover, thread_sensitive=False)(
            key, owner, ttl, if_fence=if_fence
        )

    async def aholder(self, key: str) -> Holder | None:
        """Async twin of :meth:`holder`."""
        return await sync_to_async(self.holder, thread_sensitive=False)(key)

    async def ais_held(self, lease: Lease) -> bool:
        """Async twin of :meth:`is_held`."""
        return await sync_to_async(self.is_held, thread_sensitive=False)(lease)


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
