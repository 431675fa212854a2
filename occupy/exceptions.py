"""The one error hierarchy of occupy, rooted at :class:`OccupyError`.

Every error carries the lock ``key`` it is about (``None`` where it has none) and a
message that names it, so a log line alone tells what was contended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from django.db.models import Model

    from occupy.holders import Holder

__all__ = [
    "ConflictError",
    "FencedOut",
    "InvalidBackendError",
    "LeaseLost",
    "LockTimeout",
    "MalformedPrecondition",
    "Occupied",
    "OccupyError",
    "StoreNotMigrated",
    "StoreUnavailable",
    "TakeoverRefused",
    "TransactionLockRefused",
    "VersionConflict",
]


def _rebuild(
    cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]
) -> BaseException:
    """Return an occupy error unpickled: its class, its message, its attributes."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class OccupyError(Exception):
    """Base class of every error raised by occupy."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with every attribute: the keyword-only ones ``Exception`` would lose,
        so that an error crosses a process boundary (a multiprocessing queue) whole."""
        return _rebuild, (type(self), self.args, self.__dict__)


class Occupied(OccupyError):
    """The key is held by another owner and the caller did not wait for it.

    ``holder`` is the current :class:`~occupy.leases.Holder` (never its token) when it
    is known, and ``retry_after`` the seconds until its lease expires, rounded up.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str,
        holder: Holder | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message, key=key)
        self.holder = holder
        self.retry_after = retry_after


class LockTimeout(Occupied):
    """The key stayed held by another owner for the whole ``timeout``."""


class TakeoverRefused(Occupied):
    """A conditional takeover (``takeover(..., if_fence=F)``) found the key no longer
    held by the grant whose fence is ``F``: it was released, expired, or granted again
    or taken over meanwhile. Nothing was changed.

    ``holder`` is the current :class:`~occupy.leases.Holder` (``None`` when the key is
    free), ``retry_after`` the seconds until its lease expires, rounded up, as for
    :class:`Occupied`, and ``if_fence`` the fence the caller named.
    """

    def __init__(
        self,
        message: str,
        *,
        key: str,
        holder: Holder | None = None,
        retry_after: int | None = None,
        if_fence: int | None = None,
    ) -> None:
        super().__init__(message, key=key, holder=holder, retry_after=retry_after)
        self.if_fence = if_fence


class LeaseLost(OccupyError):
    """A lease is no longer held: it expired, was swept, or was taken over."""


class TransactionLockRefused(OccupyError):
    """A key cannot be held for this transaction (``occupy.lock(key,
    scope="transaction")``): no ``transaction.atomic()`` is open on the lock table's
    database, that database is not where writes go, the transaction runs under
    REPEATABLE READ or SERIALIZABLE, or the backend's store has no transaction locks.
    The message names which, and what to do instead."""


class StoreUnavailable(OccupyError):
    """The backend's store cannot be reached or used (a server down or stalled, a lost
    connection, an unusable directory); raised ``from`` the driver's error.

    ``backend`` is the backend alias. An acquire that raises it has handed out no lease;
    a claim it could not clear up expires by its ttl.
    """

    def __init__(self, message: str, *, key: str | None = None, backend: str | None = None) -> None:
        super().__init__(message, key=key)
        self.backend = backend


class StoreNotMigrated(StoreUnavailable):
    """The backend's store lacks what occupy's migration creates (the database backend's
    claims table): ``migrate`` has not run on it, or the table was dropped. The message
    says what to run."""


class ConflictError(OccupyError):
    """A guarded write was refused; nothing was written.

    ``model`` is the model class, ``pk`` the primary key and ``fields`` the names of
    the fields the write tried to change.
    """

    def __init__(
        self,
        message: str,
        *,
        model: type[Model] | None = None,
        pk: Any = None,
        fields: tuple[str, ...] = (),
        key: str | None = None,
    ) -> None:
        super().__init__(message, key=key)
        self.model = model
        self.pk = pk
        self.fields = tuple(fields)


class VersionConflict(ConflictError):
    """The row changed since it was loaded (its version moved on)."""


class FencedOut(ConflictError):
    """The row was written under a newer fence than the writer's lease."""


class MalformedPrecondition(OccupyError, ValueError):
    """An ``If-Match`` header that is not a list of entity tags (answered with 400)."""


class InvalidBackendError(OccupyError, ImproperlyConfigured):
    """``OCCUPY["BACKENDS"]`` names an alias or class that does not exist or is wrong."""
