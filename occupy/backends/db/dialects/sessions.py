"""How a vendor's sessions behave: :class:`Sessions`, the part of a
:class:`~occupy.backends.db.dialects.base.Dialect` that is about the backend's own
connections rather than its statements: how waiters are woken, how a connection is
made, set up and bounded, and which errors may be retried. The defaults are those of
a database server reached over a socket that wakes nobody."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from occupy.backends.db.own import OwnConnection

__all__ = ["Sessions"]


class Sessions:
    """The session hooks every dialect has (see the module docstring)."""

    #: Whether a queued claim is woken by the server when its turn may have come (it
    #: listens on :meth:`channel`), rather than polling.
    wakes_waiters: ClassVar[bool] = False

    # --- waking waiters (where wakes_waiters) ---------------------------------------
    def channel(self, pending_id: int) -> str:
        """Return the channel a queued claim listens on."""
        return f"occupy_{pending_id}"

    def listen(self, channel: str) -> str:
        """Return the statement that listens on ``channel``."""
        raise NotImplementedError(f"{type(self).__name__} does not wake waiters")

    def unlisten(self, channel: str) -> str:
        """Return the statement that stops listening on ``channel``."""
        raise NotImplementedError(f"{type(self).__name__} does not wake waiters")

    def hears_notifications(self) -> bool:
        """Return whether a waiter can block until it is notified, with a timeout (only
        where :attr:`wakes_waiters`; else waiters poll)."""
        return False

    def promote_when_released(self) -> str:
        """Return the promotion that waits for a release in flight, where
        :attr:`wakes_waiters`."""
        raise NotImplementedError(f"{type(self).__name__} does not wake waiters")

    def wake_next(self) -> str | None:
        """Return the statement that wakes the next claim in line on a digest (after a
        queued claim left), or ``None`` where waiters poll."""
        return None

    def await_wake(self, own: OwnConnection, channel: str, seconds: float) -> None:
        """Block until ``channel`` is notified on ``own`` (which listens on it) or
        ``seconds`` pass."""
        time.sleep(seconds)

    # --- connections ------------------------------------------------------------------
    def connection_options(
        self, options: dict[str, Any], *, prepare: bool
    ) -> tuple[dict[str, Any], bool]:
        """Return the ``OPTIONS`` a new connection of the backend's own is made with,
        and whether the server prepares its statements (asked for with ``prepare``)."""
        return options, False

    def limit_connect(self, options: dict[str, Any], configured: Any, cutoff: float) -> None:
        """Make the driver give up connecting by ``cutoff`` (``time.monotonic()``), or
        sooner if the database's own ``connect_timeout`` (``configured``) says so:
        ``options`` are those of the connection about to connect.

        Whole seconds, 2 at least (libpq's floor). A connection from Django's pool is
        the pool's: its options are left alone.
        """
        if "pool" in options:
            return
        seconds = max(math.ceil(cutoff - time.monotonic()), 2)
        options["connect_timeout"] = min(seconds, int(configured)) if configured else seconds

    def on_connect(self, own: OwnConnection) -> None:
        """Set up a new session of one of the backend's own connections."""

    def has_rows(self, cursor: Any) -> bool:
        """Return whether the statement the driver's ``cursor`` ran returned rows (none,
        or a result set, possibly empty)."""
        return cursor.description is not None

    def bound(self, own: OwnConnection, sql: str, left: float | None, sharing: str | None) -> str:
        """Hold the statement to ``left`` seconds on the server's side where the server
        can (``None``: no bound); return the statement to run. ``sharing`` is the alias
        of the caller's open transaction on the same file, if any (see
        :meth:`caller_transaction`)."""
        return sql

    def server_session(self, own: OwnConnection) -> int | None:
        """Return the server's id of the connection's session (no round trip), or
        ``None`` where there is no server whose socket could be cut."""
        return None

    def end_session(self) -> str:
        """Return the statement that ends the server session whose id is the parameter."""
        raise NotImplementedError(f"{type(self).__name__} has no server sessions")

    def caller_transaction(self, database: str) -> str | None:
        """Return the alias of this thread's Django connection whose open transaction
        may hold the lock the backend's statements on ``database`` need, if any."""
        return None

    # --- errors -----------------------------------------------------------------------
    def is_transient(self, error: BaseException | None) -> bool:
        """Return whether a statement that failed with ``error`` did nothing and may
        simply be run again (a deadlock, a lock wait that timed out)."""
        return False

    def is_busy(self, error: BaseException | None) -> bool:
        """Return whether ``error`` says another connection holds the database's one
        write lock (a failure that did nothing, where the store has such a lock)."""
        return False

    def is_missing_table(self, error: BaseException | None) -> bool:
        """Return whether ``error`` says a table the statement names does not exist."""
        return False
