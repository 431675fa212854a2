"""The lock API's context managers: ``lock`` (also a decorator and an async context
manager) and ``lock_many``, built on :mod:`occupy.api.calls`.

Invariants: what a ``lock`` object took is kept per execution context (thread or
asyncio task), never on the object, so one shared ``lock`` releases on each exit the
lease its own context took; ``lock_many`` takes its keys in sorted order, all or none.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar, cast, overload

from occupy import telemetry
from occupy.api.calls import DEFAULT, aacquire, acquire, arelease, release
from occupy.backends import get_backend
from occupy.conf import occupy_settings
from occupy.exceptions import LeaseLost, TransactionLockRefused
from occupy.keys import KeyTemplate
from occupy.leases import Lease, TransactionHold, default_owner
from occupy.validation import (
    check_key,
    check_owner,
    check_timeout,
    check_token,
    check_ttl,
)

__all__ = ["holds_for_transaction", "lock", "lock_many"]

logger = logging.getLogger("occupy.api")
F = TypeVar("F", bound=Callable[..., Any])
#: What entering a ``lock`` gives: a :class:`Lease`, or for ``scope="transaction"`` a
#: :class:`TransactionHold`.
HeldT = TypeVar("HeldT", Lease, TransactionHold)
#: The scopes of ``lock``.
SCOPES = ("lease", "transaction")


#: What each execution context (thread, or asyncio task) holds through ``lock`` objects,
#: newest last, one :class:`_Entered` each. Kept per context, so that one ``lock`` object shared
#: by threads or tasks releases, on each exit, the lease that this context took; a tuple,
#: so that a task started inside a block sees the stack but never changes its parent's.
_held_by_locks: ContextVar[tuple[_Entered, ...]] = ContextVar("occupy_held_by_locks", default=())


class _Entered:
    """One entry into a ``lock``: the lock, the lease it took, and what made its
    section's span current (``None`` when nothing did); ``left`` once it was left (from
    its own context or handed on)."""

    __slots__ = ("context", "handed_on", "lease", "left", "lock")

    def __init__(self, owner: lock[Any], lease: Lease, context: Any) -> None:
        self.lock, self.lease, self.context = owner, lease, context
        self.left = self.handed_on = False


class lock(
    Generic[HeldT], AbstractContextManager[HeldT, None], AbstractAsyncContextManager[HeldT, None]
):
    """Hold ``key`` for the duration of a ``with`` / ``async with`` block, or of every
    call of a decorated function (sync or async).

    Takes the arguments of :func:`acquire`. As a decorator, ``key`` may be a template
    formatted with the call's arguments: ``@lock("config:{config_id}")``. Leaving the
    block releases the lease and raises :class:`~occupy.LeaseLost` if it was lost
    meanwhile (unless the block is already raising).

    ``scope="transaction"`` holds the key for the caller's ``transaction.atomic()``
    instead, until it commits or rolls back (the block's end releases nothing), and
    gives a :class:`~occupy.leases.TransactionHold`: the database backend on
    PostgreSQL only (see :mod:`occupy.backends.db.transaction`); sync code only, as
    ``atomic()`` is. Only ``timeout`` and ``backend`` apply to it, and ``lease``: a
    lease of the key the caller holds, with which the key is held for the transaction
    only while that lease is its live one (else :class:`~occupy.LeaseLost`).
    """

    @overload
    def __init__(
        self: lock[Lease],
        key: str,
        *,
        owner: str | None = None,
        ttl: float = DEFAULT,
        timeout: float | None = DEFAULT,
        renew: bool = False,
        token: str | None = None,
        reentrant: bool = True,
        backend: str = "default",
        scope: Literal["lease"] = "lease",
    ) -> None: ...

    @overload
    def __init__(
        self: lock[TransactionHold],
        key: str,
        *,
        timeout: float | None = DEFAULT,
        backend: str = "default",
        scope: Literal["transaction"],
        lease: Lease | None = None,
    ) -> None: ...

    def __init__(
        self,
        key: str,
        *,
        owner: str | None = None,
        ttl: float = DEFAULT,
        timeout: float | None = DEFAULT,
        renew: bool = False,
        token: str | None = None,
        reentrant: bool = True,
        backend: str = "default",
        scope: str = "lease",
        lease: Lease | None = None,
    ) -> None:
        if not isinstance(key, str):
            check_key(key)
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, not {scope!r}.")
        if lease is not None and scope != "transaction":
            raise TypeError("lease= is for scope='transaction' (a lease held already).")
        self.scope = scope
        self.lease = lease
        self.key = key
        self.kwargs: dict[str, Any] = {
            "owner": None if owner is None else check_owner(owner),
            "ttl": ttl if ttl is DEFAULT else check_ttl(ttl),
            "timeout": timeout if timeout is DEFAULT else check_timeout(timeout),
            "renew": bool(renew),
            "token": None if token is None else check_token(token),
            "reentrant": bool(reentrant),
            "backend": backend,
        }
        #: The entries not left yet, in every context (see :meth:`_leaving`).
        self._outstanding: list[_Entered] = []

    def _take(self) -> Lease:
        """Take the key: :func:`acquire` with this lock's arguments (a lock on a backend
        of its own overrides this and :meth:`_atake`)."""
        return acquire(self.key, **self.kwargs)

    def _hold(self) -> TransactionHold:
        """Hold the key for the caller's transaction (``scope="transaction"``)."""
        timeout = self.kwargs["timeout"]
        backend, key = get_backend(self.kwargs["backend"]), check_key(self.key)
        # Counted as an acquire (its outcome, and its wait if it waited); a hold that ends
        # with its transaction has no release, so no hold time is recorded.
        with telemetry.acquiring(backend, key, held_here=False) as watch:
            return backend.hold_for_transaction(
                key,
                timeout=occupy_settings.TIMEOUT if timeout is DEFAULT else timeout,
                lease=self.lease,
                waiting=watch.began_waiting,
            )

    async def _atake(self) -> Lease:
        """Async twin of :meth:`_take`."""
        return await aacquire(self.key, **self.kwargs)

    def _on(self, key: str) -> lock[HeldT]:
        """Return a copy of this lock on ``key`` (one per call of a decorated function)."""
        bound = copy.copy(self)
        bound.key = key
        bound._outstanding = []
        return bound

    def _entered(self, lease: Lease) -> Lease:
        """Note that this context holds ``lease`` through this lock (its section's span
        made current, when every section is traced)."""
        entry = _Entered(self, lease, telemetry.enter_section(lease))
        _held_by_locks.set((*_held_by_locks.get(), entry))
        self._outstanding.append(entry)
        return lease

    def _leaving(self) -> _Entered:
        """Return this lock's entry that this context made last; from a context that
        made none (a block handed on to another thread, a timer), the lock's only
        outstanding entry. Two or more outstanding elsewhere cannot be told apart."""
        stack = _held_by_locks.get()
        live = tuple(e for e in stack if not e.left)
        mine = [e for e in live if e.lock is self]
        outstanding = self._outstanding
        if mine:
            entry = mine[-1]
        elif len(outstanding) == 1:
            entry = outstanding[0]
            entry.handed_on = True
        else:
            raise RuntimeError(
                f"lock({self.key!r}) was left by a thread or task that did not enter it, "
                f"while {len(outstanding)} entries of it are held elsewhere."
            )
        entry.left = True
        outstanding.remove(entry)
        _held_by_locks.set(tuple(e for e in live if e is not entry))
        return entry

    @staticmethod
    def _end_section(entry: _Entered, exc_type: type[BaseException] | None) -> None:
        """Note the block's exception, if any, before the release ends the section's
        span; make the span no longer current in the context that entered it (a block
        handed on left it in the other thread's context, which it does not touch)."""
        if exc_type is not None:
            telemetry.section_raised(entry.lease, exc_type)
        if not entry.handed_on:
            telemetry.leave_section(entry.context)

    def __enter__(self) -> HeldT:
        if self.scope == "transaction":
            return self._hold()  # type: ignore[return-value]
        return self._entered(self._take())  # type: ignore[return-value]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.scope == "transaction":
            return  # held until the transaction ends
        entry = self._leaving()
        self._end_section(entry, exc_type)
        try:
            release(entry.lease)
        except LeaseLost:
            _lost_on_exit(entry.lease, exc)

    async def __aenter__(self) -> HeldT:
        if self.scope == "transaction":
            raise TransactionLockRefused(
                f"occupy.lock({self.key!r}, scope='transaction') is for the sync code that "
                "runs transaction.atomic() (which async code cannot open): call it there, "
                "e.g. in a function run by sync_to_async.",
                key=self.key,
            )
        return self._entered(await self._atake())  # type: ignore[return-value]

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        entry = self._leaving()
        self._end_section(entry, exc_type)
        try:
            await arelease(entry.lease)
        except LeaseLost:
            _lost_on_exit(entry.lease, exc)

    def __call__(self, func: F) -> F:
        """Decorate ``func`` so that each call holds the (formatted) key."""
        template = KeyTemplate(self.key, func, where=f"{func.__qualname__}()")

        def bound_lock(args: tuple[Any, ...], kwargs: dict[str, Any]) -> lock[HeldT]:
            return self._on(template.format(args, kwargs) if template.fields else self.key)

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with bound_lock(args, kwargs):
                    return await func(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with bound_lock(args, kwargs):
                return func(*args, **kwargs)

        return cast(F, wrapper)


def holds_for_transaction(backend: str, database: str) -> bool:
    """Return whether occupy backend ``backend`` can hold a key for a transaction on
    Django database ``database`` (``lock(key, scope="transaction")``): the database
    backend on PostgreSQL whose claims live in that database."""
    return get_backend(backend).transaction_refusal(database) is None


def _lost_on_exit(lease: Lease, exc: BaseException | None) -> None:
    """Re-raise the ``LeaseLost`` being handled, unless the block is already raising."""
    if exc is None:
        raise
    logger.warning("lease on %r was lost while the block raised %r", lease.key, exc)


class lock_many(AbstractContextManager[list[Lease], None]):
    """Hold several keys at once, all or nothing.

    Keys are taken in sorted order, so two callers locking the same keys in different
    orders cannot deadlock; ``timeout`` bounds the whole wait. If one key cannot be
    had, the ones already taken are released and the error is raised. Takes the other
    arguments of :func:`acquire`; yields the leases in sorted key order.
    """

    def __init__(
        self,
        keys: Iterable[str],
        *,
        owner: str | None = None,
        ttl: float = DEFAULT,
        timeout: float | None = DEFAULT,
        renew: bool = False,
        backend: str = "default",
    ) -> None:
        if isinstance(keys, str):
            raise TypeError("lock_many() takes an iterable of keys, not one str.")
        self.keys = sorted({check_key(key) for key in keys})
        if not self.keys:
            raise ValueError("lock_many() needs at least one key.")
        self.owner = owner
        self.ttl = ttl
        self.timeout = timeout if timeout is DEFAULT else check_timeout(timeout)
        self.renew = renew
        self.backend = backend
        self.leases: list[Lease] = []

    def __enter__(self) -> list[Lease]:
        timeout = occupy_settings.TIMEOUT if self.timeout is DEFAULT else self.timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        owner = default_owner() if self.owner is None else self.owner
        try:
            for key in self.keys:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self.leases.append(
                    acquire(
                        key,
                        owner=owner,
                        ttl=self.ttl,
                        timeout=left,
                        renew=self.renew,
                        backend=self.backend,
                    )
                )
        except BaseException:
            self._release_all(raise_lost=False)
            raise
        return list(self.leases)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release_all(raise_lost=exc is None)

    def _release_all(self, *, raise_lost: bool) -> None:
        lost: LeaseLost | None = None
        while self.leases:
            try:
                release(self.leases.pop())
            except LeaseLost as e:
                lost = lost or e
        if lost is not None and raise_lost:
            raise lost
