"""What an acquisition hands back: the :class:`Lease`, and the public :class:`Holder`."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from occupy import signals
from occupy.exceptions import LeaseLost
from occupy.holders import Holder

__all__ = ["Holder", "Lease", "LeaseBackend", "TransactionHold", "default_owner", "new_token"]

_HOSTNAME = socket.gethostname()


def default_owner() -> str:
    """Return ``host:pid:thread``, with ``:task`` added inside an asyncio task.

    Ownership is never kept in a thread-local: two asyncio tasks on one thread are two
    owners, so they exclude each other instead of re-entering each other's lock.
    """
    owner = f"{_HOSTNAME}:{os.getpid()}:{threading.get_ident()}"
    # Asked first: current_task() raises where no loop runs, which costs more than the
    # rest of this function.
    task = asyncio.current_task() if asyncio._get_running_loop() is not None else None
    if task is not None:
        owner = f"{owner}:{id(task):x}"
    return owner


def new_token() -> str:
    """Return an unguessable token for one acquisition (128 bits, hex)."""
    return os.urandom(16).hex()  # what secrets.token_hex(16) does, one call shorter


class LeaseBackend(Protocol):
    """What a :class:`Lease` asks of the backend that granted it (a
    :class:`~occupy.backends.base.BaseBackend`, which this module does not import: the
    backends stand on the leases)."""

    @property
    def alias(self) -> str:
        """The backend's alias in ``OCCUPY["BACKENDS"]``."""

    def release(self, lease: Lease) -> None:
        """Undo one level of ``lease``."""

    async def arelease(self, lease: Lease) -> None:
        """Async twin of :meth:`release`."""

    def extend(self, lease: Lease, ttl: float) -> None:
        """Set ``lease`` to expire ``ttl`` seconds after the store's now."""

    async def aextend(self, lease: Lease, ttl: float) -> None:
        """Async twin of :meth:`extend`."""

    def is_held(self, lease: Lease) -> bool:
        """Return whether the store still grants ``lease``."""

    async def ais_held(self, lease: Lease) -> bool:
        """Async twin of :meth:`is_held`."""


@dataclass(eq=False)
class Lease:
    """A granted lock on ``key``.

    ``fence`` strictly increases with every grant of the key; pass it to storage that
    compares it (``save(lease=…)``) so a holder whose lease was lost cannot write.
    ``expires_at`` comes from the lock store's clock. ``alias`` names the occupy backend
    that granted it (the ``backend=`` of :func:`occupy.acquire`); ``backend`` is that
    backend itself. ``depth`` is how many levels the store counted for the token when
    this object was returned (1 for a grant, one more for each re-entry): every
    re-entry returns a new ``Lease``, and a release, inner or not, lowers the store's
    count but never this number.
    """

    key: str
    owner: str
    token: str = field(repr=False)
    fence: int
    expires_at: datetime
    ttl: float
    alias: str = "default"
    renew: bool = False
    depth: int = 1
    lost: bool = field(default=False, compare=False)
    #: Whether this lease was released: a second release says so instead of asking the
    #: store, which would no longer know the token.
    released: bool = field(default=False, compare=False)
    #: The process that took the lease: a forked child must not renew or release it.
    pid: int = field(default_factory=os.getpid, repr=False, compare=False)
    backend: LeaseBackend | None = field(default=None, repr=False, compare=False)
    #: The table of the execution context that took the lease (see ``occupy.reentry``).
    held_in: dict[Any, Any] | None = field(default=None, repr=False, compare=False)

    def _backend(self) -> LeaseBackend:
        if self.backend is None:
            raise TypeError(
                f"This lease on {self.key!r} has no backend: leases are made by their "
                "backend (BaseBackend.make_lease), or rebuilt with occupy.resume()."
            )
        return self.backend

    def mark_lost(self, reason: str, *, cause: str | None = None) -> LeaseLost:
        """Mark the lease lost, send ``lease_lost`` once, and return the error to raise.

        ``cause`` is ``"store_failure"`` when the store could not be reached to keep it
        (else ``None``: it expired or was taken over, the store does not say which).
        A released lease is not lost: a renewal that reaches the store after its release
        fails, and changes nothing.
        """
        if not self.lost and not self.released:
            self.lost = True
            signals.lease_lost.send(
                sender=type(self._backend()), lease=self, reason=reason, cause=cause
            )
        return LeaseLost(f"The lease on {self.key!r} was lost: {reason}.", key=self.key)

    def extend(self, ttl: float | None = None) -> None:
        """Push the expiry ``ttl`` seconds (default: the lease's ttl) past the store's now.

        Raise :class:`~occupy.LeaseLost` if the lease is no longer held.
        """
        from occupy.validation import check_ttl

        ttl = self.ttl if ttl is None else check_ttl(ttl)
        if self.lost:
            raise LeaseLost(f"The lease on {self.key!r} was lost.", key=self.key)
        self._backend().extend(self, ttl)

    def ensure_held(self) -> None:
        """Raise :class:`~occupy.LeaseLost` unless the store still grants this lease."""
        if self.lost:
            raise LeaseLost(f"The lease on {self.key!r} was lost.", key=self.key)
        if not self._backend().is_held(self):
            raise self.mark_lost("it expired or was taken over")

    async def aextend(self, ttl: float | None = None) -> None:
        """Async twin of :meth:`extend`."""
        from occupy.validation import check_ttl

        ttl = self.ttl if ttl is None else check_ttl(ttl)
        if self.lost:
            raise LeaseLost(f"The lease on {self.key!r} was lost.", key=self.key)
        await self._backend().aextend(self, ttl)

    async def aensure_held(self) -> None:
        """Async twin of :meth:`ensure_held`."""
        if self.lost:
            raise LeaseLost(f"The lease on {self.key!r} was lost.", key=self.key)
        if not await self._backend().ais_held(self):
            raise self.mark_lost("it expired or was taken over")


@dataclass(frozen=True)
class TransactionHold:
    """A key held for the caller's own transaction (``occupy.lock(key,
    scope="transaction")``), until that transaction commits or rolls back.

    It has no token, no expiry and no fence: nothing can take it away while the
    transaction lives, and the writes it guards commit or roll back with it, so
    storage inside the database needs no fence. Writes outside the database (files,
    another service) that must refuse a late holder need a lease (the default scope),
    whose fence they compare. ``database`` is the Django database alias whose
    transaction holds it, ``alias`` the occupy backend alias.
    """

    key: str
    alias: str
    database: str
