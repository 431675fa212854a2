"""The lock API's calls: ``acquire``, ``release``, ``holder``, ``resume``, ``takeover``
and their async twins. Arguments are checked here, before any backend writes anything.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

from occupy import reentry, signals, telemetry
from occupy.backends import get_backend
from occupy.backends.base import BaseBackend
from occupy.conf import occupy_settings
from occupy.exceptions import LeaseLost, OccupyError
from occupy.leases import Holder, Lease, LeaseBackend, default_owner
from occupy.validation import (
    check_fence,
    check_key,
    check_owner,
    check_timeout,
    check_token,
    check_ttl,
)
from occupy.watchdog import watchdog

__all__ = [
    "DEFAULT",
    "aacquire",
    "acquire",
    "aholder",
    "arelease",
    "aresume",
    "atakeover",
    "holder",
    "release",
    "resume",
    "takeover",
]

logger = logging.getLogger("occupy.api")
F = TypeVar("F", bound=Callable[..., Any])


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


#: Stands for "the value in ``settings.OCCUPY``" (``TTL``, ``TIMEOUT``).
DEFAULT: Any = _Default()


def _prepare(
    key: Any, owner: Any, ttl: Any, timeout: Any, alias: Any
) -> tuple[BaseBackend, str, str, float, float | None]:
    key = check_key(key)
    owner = default_owner() if owner is None else check_owner(owner)
    ttl = occupy_settings.TTL if ttl is DEFAULT else check_ttl(ttl)
    timeout = occupy_settings.TIMEOUT if timeout is DEFAULT else check_timeout(timeout)
    return get_backend(alias), key, owner, ttl, timeout


def _granted(
    backend: BaseBackend,
    lease: Lease,
    renew: bool,
    *,
    held_here: bool = False,
    deeper: bool = False,
    watch: telemetry.Watch = None,
) -> Lease:
    telemetry.granted(backend, lease, deeper=deeper, held_here=held_here, watch=watch)
    lease.renew = renew
    if renew:
        watchdog.watch(lease)
    signals.lease_acquired.send(sender=type(backend), lease=lease)
    return lease


def acquire(
    key: str,
    *,
    owner: str | None = None,
    ttl: float = DEFAULT,
    timeout: float | None = DEFAULT,
    renew: bool = False,
    token: str | None = None,
    reentrant: bool = True,
    backend: str = "default",
) -> Lease:
    """Take the lock on ``key`` and return its :class:`~occupy.Lease`.

    ``ttl`` is how long the lease lives unless extended, ``timeout`` how long to wait
    for another holder (``0``: do not wait, ``None``: forever); both default to the
    ``OCCUPY`` settings. The thread or asyncio task that holds the key re-enters it
    when it takes it again with the same ``owner`` (one level deeper, same token and
    fence; each :func:`release` undoes one). Another thread or process that passes the
    same ``owner`` does not re-enter: it competes like anyone else, because an owner
    is a label, not a proof of holding. With ``renew=True`` a watchdog thread keeps the
    lease alive until it is released. Raise :class:`~occupy.Occupied` (``timeout=0``)
    or :class:`~occupy.LockTimeout`.

    ``token`` presents the token of a lease the caller holds (an HTTP client retrying
    its request): if it still holds ``key``, that lease is returned, kept at least
    ``ttl`` more, without a new level; otherwise the key is taken as usual.
    ``reentrant=False`` hands the lease to someone who keeps its token (an HTTP client):
    this thread or task then does not hold it, and neither re-enters it nor is re-entered.
    """
    store, key, owner, ttl, timeout = _prepare(key, owner, ttl, timeout, backend)
    return _take_on(
        store,
        key,
        owner=owner,
        ttl=ttl,
        timeout=timeout,
        renew=renew,
        token=token,
        reentrant=reentrant,
    )


def _take_on(
    backend: BaseBackend,
    key: str,
    *,
    owner: str,
    ttl: float,
    timeout: float | None,
    renew: bool,
    token: str | None,
    reentrant: bool,
) -> Lease:
    """Do the work of :func:`acquire` on ``backend``, with the arguments checked and the
    settings' defaults filled in."""
    if token is not None:
        presented = backend.resume(key, check_token(token), ttl, deeper=False)
        if presented is not None:
            return _granted(backend, presented, renew)
    held = reentry.held(backend.alias, key, owner) if reentrant else None
    lease = None if held is None else _reenter(backend.resume(key, held.token, ttl), held)
    deeper = lease is not None
    watch = None
    if lease is None:
        with telemetry.acquiring(backend, key, held_here=reentrant) as watch:
            lease = backend.acquire(
                key, owner=owner, ttl=ttl, timeout=timeout, waiting=watch.began_waiting
            )
    if reentrant:
        reentry.record(lease, deeper=deeper)
    return _granted(backend, lease, renew, held_here=reentrant, deeper=deeper, watch=watch)


def resume(key: str, token: str, *, ttl: float = DEFAULT, backend: str = "default") -> Lease:
    """Return the lease that ``token`` holds on ``key``, rebuilt from the store and kept
    at least ``ttl`` more (default: the ``TTL`` setting), for code that has only the
    token (an HTTP request carrying it). The store checks the token in the same step;
    raise :class:`~occupy.LeaseLost` if it holds nothing (forged, expired, taken over).
    No level is added: release the lease once.
    """
    store, key, _owner, ttl, _timeout = _prepare(key, None, ttl, 0, backend)
    return _held_by_token(key, store.resume(key, check_token(token), ttl, deeper=False))


async def aresume(key: str, token: str, *, ttl: float = DEFAULT, backend: str = "default") -> Lease:
    """Async twin of :func:`resume`."""
    store, key, _owner, ttl, _timeout = _prepare(key, None, ttl, 0, backend)
    lease = await store.aresume(key, check_token(token), ttl, deeper=False)
    return _held_by_token(key, lease)


def _held_by_token(key: str, lease: Lease | None) -> Lease:
    """Return ``lease``, or raise ``LeaseLost`` when the token held nothing."""
    if lease is None:
        raise LeaseLost(
            f"The token does not hold {key!r}: it expired, was released or was taken over.", key=key
        )
    return lease


def takeover(
    key: str,
    *,
    owner: str | None = None,
    ttl: float = DEFAULT,
    renew: bool = False,
    reentrant: bool = True,
    backend: str = "default",
    if_fence: int | None = None,
) -> Lease:
    """Take ``key`` now, whoever holds it, and return the new lease.

    One store operation replaces the holder and issues a higher fence, so nobody can
    slip in between: the previous lease's next extend or release raises
    :class:`~occupy.LeaseLost`, and its fenced saves raise :class:`~occupy.FencedOut`.
    Sends ``lease_taken_over`` with the holder replaced. Who may take over is the
    caller's decision (a permission, the same user's other tab): occupy does not ask.
    ``reentrant`` as for :func:`acquire`.

    ``if_fence`` makes the takeover conditional: the key is taken only if it is still
    held (live) by the grant whose fence is ``if_fence``, checked in the same store
    operation as the replacement; otherwise nothing changes and
    :class:`~occupy.TakeoverRefused` is raised, whose ``holder`` is the current holder
    (``None`` when the key is free). A fence names one grant, so a permission decided
    on a holder you read is decided on exactly the holder you replace::

        current = occupy.holder(key)
        if current is not None and may_take_from(user, current):
            lease = occupy.takeover(key, owner=me, if_fence=current.fence)

    If the holder changed in between (released, expired, taken again, taken over by
    someone else), the takeover is refused instead of replacing a holder the
    permission was never decided on: read the holder again and decide again.
    """
    store, key, owner, ttl, _timeout = _prepare(key, owner, ttl, 0, backend)
    if_fence = check_fence(if_fence)
    with telemetry.taking_over(store, key):
        lease, previous = store.takeover(key, owner, ttl, if_fence=if_fence)
    return _taken_over(store, lease, previous, renew, reentrant)


async def atakeover(
    key: str,
    *,
    owner: str | None = None,
    ttl: float = DEFAULT,
    renew: bool = False,
    reentrant: bool = True,
    backend: str = "default",
    if_fence: int | None = None,
) -> Lease:
    """Async twin of :func:`takeover`."""
    store, key, owner, ttl, _timeout = _prepare(key, owner, ttl, 0, backend)
    if_fence = check_fence(if_fence)
    with telemetry.taking_over(store, key):
        lease, previous = await store.atakeover(key, owner, ttl, if_fence=if_fence)
    return _taken_over(store, lease, previous, renew, reentrant)


def _taken_over(
    backend: BaseBackend, lease: Lease, previous: Holder | None, renew: bool, reentrant: bool
) -> Lease:
    if reentrant:
        reentry.record(lease, deeper=False)
    signals.lease_taken_over.send(sender=type(backend), lease=lease, previous=previous)
    return _granted(backend, lease, renew, held_here=reentrant)


def _reenter(lease: Lease | None, held: Lease) -> Lease | None:
    """Return the re-entered ``lease``, or forget ``held`` if the store no longer
    grants it (it expired or was taken over: the caller takes the key afresh)."""
    if lease is None:
        reentry.forget(held)
    return lease


async def aacquire(
    key: str,
    *,
    owner: str | None = None,
    ttl: float = DEFAULT,
    timeout: float | None = DEFAULT,
    renew: bool = False,
    token: str | None = None,
    reentrant: bool = True,
    backend: str = "default",
) -> Lease:
    """Async twin of :func:`acquire`; cancelling it while it waits leaves no claim."""
    store, key, owner, ttl, timeout = _prepare(key, owner, ttl, timeout, backend)
    return await _atake_on(
        store,
        key,
        owner=owner,
        ttl=ttl,
        timeout=timeout,
        renew=renew,
        token=token,
        reentrant=reentrant,
    )


async def _atake_on(
    backend: BaseBackend,
    key: str,
    *,
    owner: str,
    ttl: float,
    timeout: float | None,
    renew: bool,
    token: str | None,
    reentrant: bool,
) -> Lease:
    """Async twin of :func:`_take_on`."""
    if token is not None:
        presented = await backend.aresume(key, check_token(token), ttl, deeper=False)
        if presented is not None:
            return _granted(backend, presented, renew)
    held = reentry.held(backend.alias, key, owner) if reentrant else None
    lease = None
    if held is not None:
        lease = _reenter(await backend.aresume(key, held.token, ttl), held)
    deeper = lease is not None
    watch = None
    if lease is None:
        with telemetry.acquiring(backend, key, held_here=reentrant) as watch:
            lease = await backend.aacquire(
                key, owner=owner, ttl=ttl, timeout=timeout, waiting=watch.began_waiting
            )
    if reentrant:
        reentry.record(lease, deeper=deeper)
    return _granted(backend, lease, renew, held_here=reentrant, deeper=deeper, watch=watch)


def _releasable(lease: Any) -> Lease:
    if not isinstance(lease, Lease):
        raise TypeError(f"release() takes a Lease, not {type(lease).__name__}.")
    if lease.pid != os.getpid():
        raise OccupyError(
            f"The lease on {lease.key!r} belongs to process {lease.pid}; a forked child "
            "must not release or renew its parent's leases.",
            key=lease.key,
        )
    if lease.released:
        raise LeaseLost(
            f"The lease on {lease.key!r} was already released: release() was called on it twice.",
            key=lease.key,
        )
    if lease.renew:
        watchdog.unwatch(lease)
    if lease.lost:
        reentry.forget(lease)
        raise LeaseLost(f"The lease on {lease.key!r} was lost before release.", key=lease.key)
    return lease


def release(lease: Lease) -> None:
    """Release one level of ``lease``; raise :class:`~occupy.LeaseLost` if it was no
    longer held (it expired or was taken over: nobody else's claim is touched), or if
    this lease was released already (the message says so).

    Whatever the outcome, the lease is no longer held in-process once this returns or
    raises: if the store failed to answer, its claim is left to expire by its ttl, and
    the next :func:`acquire` in this thread makes a new claim instead of re-entering it.
    """
    lease = _releasable(lease)
    backend = lease.backend or lease._backend()
    try:
        backend.release(lease)
    except BaseException as error:
        _release_failed(lease, error)
        raise
    _released(backend, lease)


async def arelease(lease: Lease) -> None:
    """Async twin of :func:`release`."""
    lease = _releasable(lease)
    backend = lease._backend()
    try:
        await backend.arelease(lease)
    except BaseException as error:
        _release_failed(lease, error)
        raise
    _released(backend, lease)


def _released(backend: LeaseBackend, lease: Lease) -> None:
    lease.released = True
    reentry.unwind(lease)
    telemetry.released(lease)
    signals.lease_released.send(sender=type(backend), lease=lease)


def _release_failed(lease: Lease, error: BaseException) -> None:
    """Forget a lease whose release raised ``error``: it is no longer held in-process."""
    reentry.forget(lease)
    telemetry.release_failed(lease, error)


def holder(key: str, *, backend: str = "default") -> Holder | None:
    """Return who holds ``key`` (owner, expiry, fence; never the token), or ``None``."""
    return get_backend(backend).holder(check_key(key))


async def aholder(key: str, *, backend: str = "default") -> Holder | None:
    """Async twin of :func:`holder`."""
    return await get_backend(backend).aholder(check_key(key))
