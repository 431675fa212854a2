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
import random
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar

from asgiref.sync import sync_to_async
from django.core.checks import CheckMessage, Error, Warning

from occupy import telemetry
from occupy.backends.claims import UNKNOWN_OWNER
from occupy.backends.cleanup import chain_beneath, clean_up_after
from occupy.backends.options import Option, raise_problems, read_options, where
from occupy.docs import docs_url
from occupy.exceptions import (
    LeaseLost,
    LockTimeout,
    Occupied,
    OccupyError,
    StoreUnavailable,
    TakeoverRefused,
)
from occupy.leases import Holder, Lease, new_token

if TYPE_CHECKING:
    from django.db.models import Model, QuerySet

__all__ = ["STORE_GRACE", "Attempt", "BaseBackend", "Claim", "OccupationRows"]

#: How far a store call may run past the caller's deadline: a ``timeout`` of 0 still
#: allows a round trip. A grant that comes back later than this is given back.
STORE_GRACE = 1.0


@dataclass(frozen=True)
class Claim:
    """One row of ``list_locks``: a live claim on a key, without its token."""

    key: str
    owner: str
    state: str
    since: datetime | None
    expires_at: datetime
    fence: int | None


def store_reason(error: BaseException) -> str:
    """Return the first line of what the store's driver said (the cause of an occupy
    error, else the error itself), without its final full stop."""
    cause = error.__cause__ if error.__cause__ is not None else error
    lines = str(cause).strip().splitlines()
    return (lines[0] if lines else type(cause).__name__).rstrip(".")


class Attempt:
    """One caller's try to take ``key``; built by :meth:`BaseBackend.attempt`.

    Backends override :meth:`try_acquire` and :meth:`cancel`, and where they can do
    better than polling, :meth:`enqueue` and :meth:`wait`. Calls on one attempt are
    serialized, so a cancellation never overtakes a grant that is still in flight
    (an async caller cancelled while its worker thread is mid-statement).
    """

    #: First and largest pause between two tries while waiting (at the head of a queue,
    #: or where there is none), in seconds.
    first_delay = 0.002
    max_delay = 0.05
    #: How many claims were queued ahead of this attempt's at its last look, where a
    #: polling backend knows (else ``None``; see :meth:`note_place`).
    ahead: int | None = None
    #: The longest pause of a waiter that knows its place in the queue, in seconds.
    longest_queued_pause = 1.0
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
        self._tries = 0
        #: When this attempt first saw its place, and the place then.
        self._first_place: tuple[float, int] | None = None

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

    def note_place(self, ahead: int | None) -> None:
        """Record how many claims are queued ahead of this attempt's (``None``: not known,
        as when it has just queued again), for a backend whose waiters poll.

        The first three in line poll at the pace of a lone waiter: the next in line
        must be ready the moment the head is served, and it learns that it has moved
        up only when it looks. A waiter further back (``k > 2`` ahead) pauses for half
        the time the ``k - 2`` claims ahead of the third should take to be served,
        at the pace the queue has moved since it first looked (one ``max_delay`` per
        claim until it has moved; never faster than ``max_delay``), up to
        :attr:`longest_queued_pause`. So it looks
        about ``log2 k`` times while ``k`` are served before it, and a queue of ``n``
        makes about ``ln n`` polls per release, not ``n``.
        """
        now = time.monotonic()
        first = self._first_place
        if ahead is None or first is None or ahead > first[1]:
            self._first_place = None if ahead is None else (now, ahead)
        self.ahead = ahead

    def _turn(self) -> float:
        """Return the seconds one claim ahead has taken to be served, as far as seen: at
        least ``max_delay``, and while the queue has not moved, all the time since the
        first look (a queue stuck behind a long hold is looked at ever less often)."""
        first, ahead = self._first_place, self.ahead
        if first is None or ahead is None:
            return self.max_delay
        moved = max(first[1] - ahead, 1)
        return max((time.monotonic() - first[0]) / moved, self.max_delay)

    def next_delay(self) -> float:
        """Return the next pause: capped exponential backoff with jitter, or while
        others are queued ahead, one paced by the queue (see :meth:`note_place`)."""
        if self.ahead is not None and self.ahead > 2:
            queued = min((self.ahead - 2) * self._turn() / 2, self.longest_queued_pause)
            return max(queued, self.max_delay) * random.uniform(0.75, 1.0)
        delay: float = min(self.max_delay, self.first_delay * (2 ** min(self._tries, 16)))
        self._tries += 1
        return delay * random.uniform(0.5, 1.0)

    def wait(self, seconds: float) -> None:
        """Block until the key may be free or ``seconds`` pass (default: sleep)."""
        time.sleep(seconds)

    async def await_wake(self, seconds: float) -> None:
        """Async twin of :meth:`wait` (default: ``asyncio.sleep``)."""
        await asyncio.sleep(seconds)

    # --- serialized entry points used by BaseBackend ------------------------------
    def _locked(self, method: str) -> Any:
        with self.mutex:
            result = getattr(self, method)()
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


class OccupationRows:
    """What the model side reads of a backend that keeps its claims as ``Occupation``
    rows (``occupied()``, ``free()``, ``claim()``, the admin's status column).

    A backend offers it through :meth:`BaseBackend.occupation_rows`; one that keeps its
    claims elsewhere returns ``None`` there, and those features say so.
    """

    #: The database alias that holds the ``occupy_occupation`` table.
    database: str

    def live(self, model: type[Model]) -> QuerySet[Any]:
        """Return the live granted claims on rows of ``model`` (the model the lock keys
        name), as ``Occupation`` rows."""
        raise NotImplementedError("subclasses of OccupationRows must provide a live() method")

    def object_id_text(self) -> Any:
        """Return an expression of a claim's ``object_id`` as text that equals
        ``Cast(pk, TextField())`` of its row, in the claims' database."""
        raise NotImplementedError(
            "subclasses of OccupationRows must provide an object_id_text() method"
        )

    def lease(self, claim: Mapping[str, Any], ttl: float) -> Lease:
        """Return the lease a live claim (a ``values()`` row of :meth:`live`) stands for."""
        raise NotImplementedError("subclasses of OccupationRows must provide a lease() method")


class BaseBackend:
    """Base class of the lock stores: the whole of what occupy asks of one.

    A backend is configured as ``OCCUPY["BACKENDS"][alias]``: ``BACKEND`` (this class's
    dotted path), ``LOCATION`` where the store needs one, and ``OPTIONS`` as declared in
    :attr:`options_schema`. Nothing outside ``occupy.backends`` asks which class a
    backend is: what differs is declared here (the options, :meth:`check`,
    :meth:`occupation_rows`) and written in the contract block.
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

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
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
        if not found:
            return []
        shown = ", ".join(repr(name) for name in found[:3])
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
        return [
            Warning(
                f"occupy backend {self.alias!r} has {len(found)} claim(s) occupy did not write: "
                f"{shown}{more}. Each is held by an unknown holder until it expires.",
                hint="Give occupy a store of its own (a Redis PREFIX, a LOCATION); "
                "sweep_locks removes expired claim files, and Redis drops values when they "
                "expire (delete those without an expiry by hand).",
                obj=where(self.alias),
                id="occupy.W004",
            )
        ]

    def unreachable_store(self, error: BaseException) -> CheckMessage:
        """Return ``occupy.W007``: the store could not be read (``check --database``)."""
        return Warning(
            f"occupy backend {self.alias!r} could not read {self.describe_store()}: "
            f"{store_reason(error)}.",
            hint=f"{self.store_fix()[0].upper()}{self.store_fix()[1:]}.",
            obj=where(self.alias),
            id="occupy.W007",
        )

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
            expires_at=_utc(expires_at),
            ttl=ttl,
            using=self.alias,
            depth=depth,
            backend=self,
        )

    @staticmethod
    def make_holder(
        owner: str, expires_at: datetime, fence: int, since: datetime | None = None
    ) -> Holder:
        """Return the :class:`~occupy.leases.Holder` for a claim read from the store."""
        return Holder(
            owner=owner,
            expires_at=_utc(expires_at),
            fence=int(fence),
            since=None if since is None else _utc(since),
        )

    @staticmethod
    def takeover_refused(
        key: str, if_fence: int, holder: Holder | None, remaining: float | None
    ) -> TakeoverRefused:
        """Return the error for a conditional takeover of ``key`` that found another
        holder than the grant with fence ``if_fence``: ``holder`` (``None`` when the key
        is free), with ``remaining`` seconds left by the store's clock."""
        now = "free" if holder is None else f"held by {holder.owner!r} (fence {holder.fence})"
        return TakeoverRefused(
            f"{key!r} was not taken over: its holder changed since it was read (the grant "
            f"with fence {if_fence} no longer holds it; it is now {now}).",
            key=key,
            holder=holder,
            if_fence=if_fence,
            retry_after=(
                None if holder is None or remaining is None else max(1, math.ceil(remaining))
            ),
        )

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

    def drop_claim(self, key: str) -> None:
        """Delete the granted claim on ``key`` behind its holder's back, as an operator
        or a bug would: a test hook, so that the contract suite can check that a holder
        finds out (``ensure_held``, the watchdog, ``release``)."""
        raise NotImplementedError("subclasses of BaseBackend must provide a drop_claim() method")

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
            lease = await run("try_acquire")
            if lease is None and timeout != 0:
                lease = await run("enqueue")
                while lease is None and (remaining := _left(deadline)) > 0:
                    await attempt.await_wake(_pause(attempt, remaining))
                    lease = await run("try_acquire")
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
                await asyncio.shield(run("abandon"))
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
        retry_after = None if remaining is None else max(1, math.ceil(remaining))
        who = f" by {holder.owner!r}" if holder else ""
        if waited:
            return LockTimeout(
                f"{attempt.key!r} is still held{who} after waiting {waited:g} s; "
                "someone else is working on it, try again later.",
                key=attempt.key,
                holder=holder,
                retry_after=retry_after,
            )
        return Occupied(
            f"{attempt.key!r} is held{who}; someone else is working on it, try again later.",
            key=attempt.key,
            holder=holder,
            retry_after=retry_after,
        )

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


def _utc(moment: datetime) -> datetime:
    """Return ``moment`` as an aware UTC ``datetime`` (a naive one is taken as UTC)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def _left(deadline: float | None) -> float:
    """Return the seconds left before ``deadline`` (always infinity when ``None``)."""
    return math.inf if deadline is None else deadline - time.monotonic()


def _pause(attempt: Attempt, remaining: float) -> float:
    return min(attempt.next_delay(), remaining)


def _in_thread(attempt: Attempt) -> Any:
    def call(method: str) -> Any:
        return sync_to_async(attempt._locked, thread_sensitive=False)(method)

    return call
