"""The backend spec: :class:`BaseBackend`, the one class a lock store subclasses, like
Django's ``BaseCache`` or ``SessionBase``.

A backend is built once per alias from ``OCCUPY["BACKENDS"][alias]``. It writes the
methods in the block marked *the contract* (:meth:`BaseBackend.attempt`, which returns
an :class:`~occupy.backends.attempt.Attempt`, and the calls on a lease or a key), may
override those marked *what a backend may override*, and gets the rest once, for every
backend: reading and checking its configuration, the waiting loop and its async twin,
cancellation, the errors, the leases and holders it hands out, the async twins.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Any, ClassVar

from asgiref.sync import sync_to_async
from django.core.checks import CheckMessage, Error

from occupy import signals, telemetry
from occupy.backends.attempt import STORE_GRACE, Attempt
from occupy.backends.claims import UNKNOWN_OWNER
from occupy.backends.cleanup import chain_beneath, clean_up_after
from occupy.backends.configuration import store_reason, unknown_claims, unreachable_store
from occupy.backends.options import Option, raise_problems, read_options, where
from occupy.backends.outcomes import make_holder, occupied, takeover_refused, utc
from occupy.backends.rows import Claim, OccupationRows
from occupy.docs import docs_url
from occupy.exceptions import (
    LockTimeout,
    Occupied,
    OccupyError,
    StoreUnavailable,
    TransactionLockRefused,
)
from occupy.leases import Holder, Lease, TransactionHold

__all__ = [
    "DEFAULT_SWEEP_BATCH",
    "MAX_SWEEP_BATCH",
    "STORE_GRACE",
    "Attempt",
    "BaseBackend",
    "Claim",
    "OccupationRows",
    "store_reason",
]

#: The most claims one statement of a sweep may delete (``sweep_locks --batch-size``):
#: every store's integers hold it, and a larger batch only holds its locks longer.
MAX_SWEEP_BATCH = 1_000_000
#: The claims one statement of a sweep deletes unless told: enough that a statement's
#: round trip and commit cost little per claim (at 1,000, a PostgreSQL sweep spent
#: most of its time on them), few enough that its locks are held some milliseconds.
DEFAULT_SWEEP_BATCH = 10_000


class BaseBackend:
    """Base class of the lock stores: the whole of what occupy asks of one.

    A backend is configured as ``OCCUPY["BACKENDS"][alias]``: ``BACKEND`` (this class's
    dotted path), ``LOCATION`` where the store needs one, and ``OPTIONS`` as declared in
    :attr:`options_schema`. Nothing outside ``occupy.backends`` asks which class a
    backend is: what differs is declared here (the options, :meth:`check`,
    :meth:`occupation_rows`) and written in the contract block.

    What every method may rely on, and must keep:

    - One instance per alias serves every thread of the process (``get_backend``
      builds it once): per-thread state (connections) lives in thread-locals, and a
      forked child must neither use nor close its parent's sessions (build new ones
      when the process id changed).
    - A ``ttl`` is seconds between :data:`~occupy.validation.MIN_TTL` (a millisecond)
      and :data:`~occupy.validation.MAX_TTL` (ten years), checked before the backend
      is called: the store must keep at least millisecond precision over that range.
    - A value under the store's names that occupy did not write (another program's, or
      a corrupted one) is never read as a grant: the key counts as held (or the store
      as unusable, naming what to remove), never as free; ``claims()`` lists it owned
      by :data:`~occupy.backends.claims.UNKNOWN_OWNER`, and ``check --database`` warns
      of it (``occupy.W004``).
    """

    #: The ``OPTIONS`` keys this backend takes; any other key is refused (a typo).
    options_schema: ClassVar[Mapping[str, Option]] = {}
    #: Whether the configuration must give a ``LOCATION`` (a directory, a URL).
    requires_location: ClassVar[bool] = False
    #: The errors by which the store's client says it cannot be reached or used
    #: (see :meth:`reaching`).
    store_errors: tuple[type[BaseException], ...] = ()
    #: Whether the store drops expired claims by itself (Redis, caches), so that
    #: ``sweep_locks`` has nothing to do; a backend whose expired claims stay until
    #: swept sets it to False and writes :meth:`sweep`.
    expires_by_itself: ClassVar[bool] = True

    # --- the configuration ---------------------------------------------------------------
    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        """Read ``params`` (``OCCUPY["BACKENDS"][alias]``); raise ``InvalidBackendError``,
        naming the alias and the key, when it is wrong."""
        options, problems = read_options(alias, params, self.options_schema)
        raise_problems(problems + self.config_problems(alias, params, options))
        self.alias = alias
        self.params = params
        self.options: dict[str, Any] = options
        self.location = params.get("LOCATION")

    @classmethod
    def config_problems(
        cls, alias: str, params: Mapping[str, Any], options: Mapping[str, Any]
    ) -> list[str]:
        """Return what is wrong with the configuration beyond each option's own type and
        range: ``LOCATION``, options that must agree with each other. ``options`` holds
        every option, defaults filled in. The default checks only that a backend which
        :attr:`requires_location` has one."""
        if cls.requires_location and not params.get("LOCATION"):
            return [f"{where(alias)} ({cls.__name__}) has no LOCATION."]
        return []

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Return the system check messages for this backend's configuration.

        ``manage.py check`` calls it for every alias. The default reports what building
        the backend would refuse (``occupy.E006``); a backend adds what it can only
        check against the rest of the settings (a database or cache that is not
        configured, a cache that cannot lock) with ``super().check(...) + [...]``.
        """
        options, problems = read_options(alias, params, cls.options_schema)
        problems += cls.config_problems(alias, params, options)
        return [
            Error(
                problem,
                obj=where(alias),
                id="occupy.E006",
                hint=f"{cls.__name__}'s options are listed in its options_schema "
                f"and, for occupy's backends, at {docs_url('backends/')}.",
            )
            for problem in problems
        ]

    # --- the contract: each backend writes these -------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> Attempt:
        """Return an :class:`~occupy.backends.attempt.Attempt` to take ``key`` for
        ``owner`` for ``ttl`` seconds."""
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
        """Yield the live claims (:class:`Claim`), for ``list_locks``.

        A store that cannot list its keys raises :class:`NotImplementedError` with a
        sentence saying so: ``list_locks`` prints it for this backend and goes on with
        the others.
        """
        raise NotImplementedError("subclasses of BaseBackend must provide a claims() method")

    # --- what a backend may override ---------------------------------------------------
    def transaction_refusal(self, database: str | None = None) -> str | None:
        """Return why this backend cannot hold a key for the caller's own transaction
        (on ``database``, if given: the alias the transaction writes to), or ``None``
        when :meth:`hold_for_transaction` can. The default: a store that is not a
        database, where no transaction of the app's can hold a key."""
        return (
            f"occupy backend {self.alias!r} ({type(self).__name__}) keeps its claims outside "
            "the database, where no transaction of the app's can hold them: a key is held "
            "for a transaction only by the database backend on PostgreSQL. Take a lease "
            "instead: occupy.lock(key) without scope."
        )

    def hold_for_transaction(
        self,
        key: str,
        *,
        timeout: float | None,
        lease: Lease | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> TransactionHold:
        """Hold ``key`` for the caller's open transaction until it commits or rolls back
        (``occupy.lock(key, scope="transaction")``); with ``lease``, only while that
        lease of the caller's holds the key; ``waiting`` as for :meth:`acquire`. Raise
        :class:`~occupy.exceptions.TransactionLockRefused` where the backend cannot
        (see :meth:`transaction_refusal`)."""
        raise TransactionLockRefused(self.transaction_refusal() or "", key=key)

    def sweep(
        self,
        *,
        batch_size: int = DEFAULT_SWEEP_BATCH,
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

    def occupation_rows(self) -> OccupationRows | None:
        """Return how the model side reads this backend's claims as ``Occupation`` rows,
        or ``None`` (the default) when it keeps them elsewhere."""
        return None

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

    # --- what occupy gives every backend -----------------------------------------------
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
            alias=self.alias,
            depth=depth,
            backend=self,
        )

    make_holder = staticmethod(make_holder)
    takeover_refused = staticmethod(takeover_refused)

    def unavailable(self, key: str | None, error: BaseException) -> StoreUnavailable:
        """Return the error for a store that failed while occupy worked on ``key``; the
        caller raises it ``from error``."""
        on = "" if key is None else f" while working on {key!r}"
        telemetry.store_error(self, key)
        return StoreUnavailable(
            f"occupy backend {self.alias!r} ({type(self).__name__}) could not use its "
            f"store{on}: {error}",
            key=key,
            backend=self.alias,
        )

    @contextmanager
    def reaching(self, key: str | None) -> Iterator[None]:
        """Raise :attr:`store_errors` from inside the block as ``StoreUnavailable``."""
        try:
            yield
        except self.store_errors as e:
            raise self.unavailable(key, e) from e

    def unreachable_store(self, error: BaseException) -> CheckMessage:
        """Return ``occupy.W007``: the store could not be read (``check --database``)."""
        return unreachable_store(self.alias, self.describe_store(), self.store_fix(), error)

    def clear_expired(
        self,
        *,
        batch_size: int = DEFAULT_SWEEP_BATCH,
        dry_run: bool = False,
        removed: Callable[[str], None] | None = None,
    ) -> int:
        """Remove expired claims (:meth:`sweep`) and send
        :data:`~occupy.signals.lease_expired` with how many; return that number.
        ``sweep_locks`` calls it, as Django's ``clearsessions`` calls
        ``SessionStore.clear_expired()``.

        Raises ``ValueError`` for a ``batch_size`` outside 1 to
        :data:`MAX_SWEEP_BATCH`, before the store is asked anything.
        """
        if isinstance(batch_size, bool) or not 1 <= batch_size <= MAX_SWEEP_BATCH:
            raise ValueError(
                f"batch_size must be between 1 and {MAX_SWEEP_BATCH:,}, not {batch_size!r}."
            )
        count = self.sweep(batch_size=batch_size, dry_run=dry_run, removed=removed)
        if count and not dry_run:
            signals.lease_expired.send(sender=type(self), key=None, count=count)
        return count

    def __repr__(self) -> str:
        return f"<{type(self).__name__} alias={self.alias!r}>"

    # --- generic work ----------------------------------------------------------------
    def acquire(
        self,
        key: str,
        *,
        owner: str,
        ttl: float,
        timeout: float | None,
        waiting: Callable[[], None] | None = None,
    ) -> Lease:
        """Take ``key``, waiting at most ``timeout`` seconds (``None``: forever).
        ``waiting`` is called once, when the first try found the key held and the
        acquire goes on to wait (telemetry's wait starts there)."""
        # One thread makes every call on this attempt, so they need no mutex.
        attempt = self.attempt(key, owner, ttl)
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt.deadline = deadline
        try:
            lease = attempt.try_acquire()
            if lease is None and timeout != 0:
                if waiting is not None:
                    waiting()
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

    async def aacquire(
        self,
        key: str,
        *,
        owner: str,
        ttl: float,
        timeout: float | None,
        waiting: Callable[[], None] | None = None,
    ) -> Lease:
        """Async twin of :meth:`acquire`; cancelling it leaves no claim behind."""
        attempt = self.attempt(key, owner, ttl)
        attempt.asynchronous = True
        deadline = None if timeout is None else time.monotonic() + timeout
        attempt.deadline = deadline
        run = _in_thread(attempt)
        try:
            lease = await run(attempt.try_acquire)
            if lease is None and timeout != 0:
                if waiting is not None:
                    waiting()
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

    # --- async twins -------------------------------------------------------------------
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
