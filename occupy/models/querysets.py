"""The model side's queryset methods, one mixin per concern (``RowLockQuerySetMixin``:
``locked()``; ``VersionedQuerySetMixin``: ``update_versioned()``;
``OccupiableQuerySetMixin``: ``occupied()``, ``free()``, ``claim()``;
``OccupyQuerySetMixin``: all of them), each with a thin queryset and manager class, and
the one :class:`OccupyManager` every occupy model mixin installs as ``objects``. How to
combine them with querysets of your own: docs/topics/models.md ("Managers").

Invariants: every class is generic in the model (``Book.objects.claim()`` is a
``Book | None``); a method that needs what the model lacks raises ``TypeError`` naming
the model; ``locked()``, ``occupied()``, ``free()`` and ``claim()`` work on any model,
its rows' keys being :func:`~occupy.models.object_key`'s; ``using`` is always the
database, never an occupy backend.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.db import models, transaction
from django.db.models import F

from occupy import keys, telemetry
from occupy.api import DEFAULT, lock
from occupy.exceptions import VersionConflict
from occupy.models.keys import lock_model
from occupy.models.pool import Pool, occupation_filter, occupation_rows
from occupy.models.rowlocks import locked_rows

__all__ = [
    "ModelT",
    "OccupiableManager",
    "OccupiableQuerySet",
    "OccupiableQuerySetMixin",
    "OccupyManager",
    "OccupyQuerySet",
    "OccupyQuerySetMixin",
    "RowLockManager",
    "RowLockQuerySet",
    "RowLockQuerySetMixin",
    "VersionedManager",
    "VersionedQuerySet",
    "VersionedQuerySetMixin",
]

#: The model a queryset or manager is for.
ModelT = TypeVar("ModelT", bound=models.Model, covariant=True)

if TYPE_CHECKING:
    from typing_extensions import Self

    # For type checkers a queryset mixin is a QuerySet of its model; at run time it is
    # a plain generic class, mixed in before QuerySet.
    _QuerySet = models.QuerySet
else:
    _QuerySet = Generic


class RowLockQuerySetMixin(_QuerySet[ModelT]):
    """Add ``locked()`` to a ``QuerySet`` subclass: a row lock held for a block."""

    def locked(
        self,
        *args: Any,
        nowait: bool = False,
        skip_locked: bool = False,
        of: tuple[str, ...] = (),
        **kwargs: Any,
    ) -> AbstractContextManager[Any]:
        """Open a transaction, lock the row matching the lookups and yield it.

        Like ``get()``; with ``skip_locked=True`` like ``first()``: the first matching
        row nobody else has locked, or ``None``. ``nowait=True`` raises
        :class:`~occupy.Occupied` instead of waiting for another transaction's lock.
        The transaction commits when the block ends (rolls back if it raises)::

            with Goods.objects.locked(pk=3) as goods:
                goods.count -= 1
                goods.save(update_fields=["count"])

        On SQLite, which has no row locks, the transaction takes the database's write
        lock first (as ``BEGIN IMMEDIATE`` would), which serializes writers just the
        same. Refuse options the database cannot honour with ``NotSupportedError``.
        """
        return locked_rows(self, *args, nowait=nowait, skip_locked=skip_locked, of=of, **kwargs)


class VersionedQuerySetMixin(_QuerySet[ModelT]):
    """Add ``update_versioned()``, the guarded ``update()``, to a ``QuerySet`` subclass
    of a :class:`~occupy.models.VersionedMixin` model."""

    def update_versioned(self, *, expected: int | None = None, **changes: Any) -> int:
        """Update the matched rows like ``update()`` and bump each one's version, in one
        transaction; return how many rows matched.

        ``QuerySet.update()`` neither checks nor bumps a ``VersionedMixin`` model's
        version; this bumps it, so an instance loaded before the update conflicts when
        it is saved (whatever the policy) and ETags change. With ``expected`` (the
        row count you expect, e.g. ``1`` for
        ``filter(pk=…, version=loaded_version)``), any other count rolls the update
        back and raises :class:`~occupy.VersionConflict`. A model without
        ``VersionedMixin`` raises ``TypeError``.
        """
        # The version_policy attribute marks VersionedMixin, which imports this module.
        if not hasattr(self.model, "version_policy"):
            raise TypeError(
                f"update_versioned() needs a model with VersionedMixin; "
                f"{self.model._meta.label} has no version."
            )
        name = self.model.version_field_name  # type: ignore[attr-defined]
        if name in changes:
            raise ValueError(f"update_versioned() sets {name} itself; do not pass it.")
        if expected is not None and (
            isinstance(expected, bool) or not isinstance(expected, int) or expected < 0
        ):
            raise ValueError(f"expected must be a row count (an int ≥ 0), not {expected!r}.")
        # select_for_update() marks a clone "for write", so .db is the router's write db.
        with transaction.atomic(using=self.select_for_update().db):
            count = self.update(**{name: F(name) + 1}, **changes)
            if expected is not None and count != expected:
                error = VersionConflict(
                    f"update_versioned() matched {count} {self.model._meta.label} rows, not "
                    f"{expected}: they changed since they were read; nothing was written.",
                    model=self.model,
                    fields=tuple(changes),
                )
                telemetry.refused(error)
                raise error
        return count


class OccupiableQuerySetMixin(_QuerySet[ModelT]):
    """Add ``occupied()``, ``free()`` and ``claim()`` to a ``QuerySet`` subclass: which
    rows' lock keys ``"<app_label>.<model_name>:<pk>"`` are held, and the task pool.

    They read the claims of a ``DatabaseBackend`` (its ``Occupation`` rows); other
    backends are refused with :class:`~occupy.InvalidBackendError`. ``backend=`` is
    the occupy backend alias (default: the model's ``occupy_backend``, else
    ``"default"``); ``using`` keeps Django's meaning, the database:
    ``Task.objects.using("other").claim(…)`` reads and hands out the rows of the
    database ``"other"``.
    """

    def occupied(self, *, backend: str | None = None) -> Self:
        """Return the rows whose lock key is held now on the occupy backend ``backend``
        (expired claims count as free)."""
        return self.filter(occupation_filter(self, _backend_of(self.model, backend)))

    def free(self, *, backend: str | None = None) -> Self:
        """Return the rows whose lock key nobody holds now (the complement of
        :meth:`occupied`)."""
        return self.exclude(occupation_filter(self, _backend_of(self.model, backend)))

    def claim(
        self,
        *,
        owner: str | None = None,
        ttl: float = DEFAULT,
        order_by: tuple[str, ...] | list[str] | None = None,
        backend: str | None = None,
    ) -> ModelT | None:
        """Hand the next free row to ``owner`` and return it, its lease at ``.lease``
        (release it with ``occupy.release(item.lease)``); ``None`` when nothing is free.

        While ``owner`` still holds a row of this queryset, return that row and the
        same lease again: one row per owner at a time. That hand-back is an assignment,
        not exclusion: whoever passes the same ``owner`` is handed the same row and
        lease (the owner names whom the task is assigned to), unlike ``acquire``,
        where an owner string never re-enters a lease. A row whose holder's lease
        expired is free again. Rows are offered in ``order_by`` (else the queryset's
        ordering, else by primary key); on PostgreSQL and MariaDB/MySQL, concurrent
        claimers skip the rows others are claiming (``SKIP LOCKED``) instead of
        queueing behind them. Needs the database backend.
        """
        alias = _backend_of(self.model, backend)
        rows = occupation_rows(alias, "claim()")
        pool = Pool(self, alias, rows, owner=owner, ttl=ttl, order_by=order_by)
        if owner is None:
            # The default owner names this thread (or asyncio task), which runs one
            # claim at a time: there is nothing to serialize, and the owner's lock
            # would cost two statements of the five a claim sends.
            mine: ModelT | None = pool.held() or pool.take_next()
            return mine
        # Claims of one owner run one at a time (they may come from several requests
        # at once), so that two of them cannot each take a different row.
        with lock(_claim_key(self.model, pool.owner), ttl=30, timeout=30, backend=alias):
            item: ModelT | None = pool.held() or pool.take_next()
            return item


class OccupyQuerySetMixin(
    RowLockQuerySetMixin[ModelT], VersionedQuerySetMixin[ModelT], OccupiableQuerySetMixin[ModelT]
):
    """Every occupy queryset method: ``locked()``, ``update_versioned()``,
    ``occupied()``, ``free()`` and ``claim()``; mix into a ``QuerySet`` subclass."""


class RowLockQuerySet(RowLockQuerySetMixin[ModelT], models.QuerySet[ModelT]):
    """A ``QuerySet`` with :class:`RowLockQuerySetMixin`."""


class VersionedQuerySet(VersionedQuerySetMixin[ModelT], models.QuerySet[ModelT]):
    """A ``QuerySet`` with :class:`VersionedQuerySetMixin`."""


class OccupiableQuerySet(OccupiableQuerySetMixin[ModelT], models.QuerySet[ModelT]):
    """A ``QuerySet`` with :class:`OccupiableQuerySetMixin`."""


class OccupyQuerySet(OccupyQuerySetMixin[ModelT], models.QuerySet[ModelT]):
    """A ``QuerySet`` with :class:`OccupyQuerySetMixin`."""


_RowLockManagerBase = models.Manager.from_queryset(RowLockQuerySet)
_VersionedManagerBase = models.Manager.from_queryset(VersionedQuerySet)
_OccupiableManagerBase = models.Manager.from_queryset(OccupiableQuerySet)
_OccupyManagerBase = models.Manager.from_queryset(OccupyQuerySet)


class RowLockManager(_RowLockManagerBase[ModelT]):
    """A manager with ``locked()``."""


class VersionedManager(_VersionedManagerBase[ModelT]):
    """A manager with ``update_versioned()``."""


class OccupiableManager(_OccupiableManagerBase[ModelT]):
    """A manager with ``occupied()``, ``free()`` and ``claim()``."""


class OccupyManager(_OccupyManagerBase[ModelT]):
    """The manager every occupy model mixin installs as ``objects``: every occupy
    queryset method (``locked()``, ``update_versioned()``, ``occupied()``, ``free()``,
    ``claim()``), each also on the querysets it returns."""


def _backend_of(model: type[models.Model], backend: str | None) -> str:
    if backend is not None:
        return backend
    return str(getattr(model, "occupy_backend", "default"))


def _claim_key(model: type[models.Model], owner: str) -> str:
    # Owners may be long: a digest keeps the key short (see occupy.keys).
    return keys.fit(f"occupy.claim:{lock_model(model)._meta.label_lower}:", owner)
