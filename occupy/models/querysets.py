"""``OccupyQuerySetMixin`` and its thin concrete classes ``OccupyQuerySet`` and
``OccupyManager``: row locks, occupied/free filters, the task pool, guarded updates.

Mix the queryset mixin into your own querysets (like django-model-utils)::

    class TaskQuerySet(OccupyQuerySetMixin, models.QuerySet):
        def open(self): return self.filter(done=False)

    class Task(OccupiableMixin, models.Model):
        objects = TaskQuerySet.as_manager()

Methods that consult locks take ``using=``, the occupy backend alias (default: the
model's ``occupy_using``, else ``"default"``); the database is the queryset's own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import (
    DatabaseError,
    NotSupportedError,
    OperationalError,
    connections,
    models,
    transaction,
)
from django.db.models import F

from occupy.api import DEFAULT, lock
from occupy.exceptions import Occupied, VersionConflict
from occupy.models.keys import lock_model, object_key
from occupy.models.pool import Pool, occupation_filter, occupation_rows

__all__ = ["OccupyManager", "OccupyQuerySet", "OccupyQuerySetMixin"]


class OccupyQuerySetMixin:
    """Queryset methods for concurrency control; mix into a ``QuerySet`` subclass."""

    model: type[models.Model]

    def _occupy_alias(self, using: str | None) -> str:
        if using is not None:
            return using
        return getattr(self.model, "occupy_using", "default")

    def _write_db(self) -> str:
        # select_for_update() marks a clone "for write", so .db is the router's write db.
        return self.select_for_update().db  # type: ignore[attr-defined]

    # --- row locks (seed 002) -----------------------------------------------------
    @contextmanager
    def locked(
        self, *args: Any, nowait: bool = False, skip_locked: bool = False,
        of: tuple[str, ...] = (), **kwargs: Any,
    ) -> Iterator[Any]:
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
        if nowait and skip_locked:
            raise ValueError("locked() takes nowait or skip_locked, not both.")
        db = self._write_db()
        conn = connections[db]
        features = conn.features
        if features.has_select_for_update:
            for wanted, name, feature in (
                (nowait, "nowait", "has_select_for_update_nowait"),
                (skip_locked, "skip_locked", "has_select_for_update_skip_locked"),
                (of, "of", "has_select_for_update_of"),
            ):
                if wanted and not getattr(features, feature):
                    raise NotSupportedError(
                        f"locked({name}=…) needs SELECT … FOR UPDATE "
                        f"{name.upper().replace('_', ' ')}, which the {conn.display_name} "
                        f"database {db!r} does not support."
                    )
            queryset = self.select_for_update(  # type: ignore[attr-defined]
                nowait=nowait, skip_locked=skip_locked, of=of)
        elif conn.vendor == "sqlite":
            queryset = self.using(db)  # type: ignore[attr-defined]
        else:
            raise NotSupportedError(
                f"locked() needs row locks (SELECT … FOR UPDATE), which the "
                f"{conn.display_name} database {db!r} does not have."
            )
        nested = conn.in_atomic_block
        with transaction.atomic(using=db):
            try:
                if not features.has_select_for_update:
                    _take_sqlite_write_lock(conn, self.model, nowait=nowait, nested=nested)
                if skip_locked:
                    instance = queryset.filter(*args, **kwargs).first()
                else:
                    instance = queryset.get(*args, **kwargs)
            except DatabaseError as e:
                if nowait and _lock_unavailable(conn.vendor, e):
                    key = _lookup_key(self.model, kwargs)
                    raise Occupied(
                        f"{key!r} is locked by another transaction; try again later.",
                        key=key,
                    ) from e
                raise
            yield instance

    # --- guarded bulk update --------------------------------------------------------
    def update_versioned(self, *, expected: int | None = None, **changes: Any) -> int:
        """Update the matched rows like ``update()`` and bump each one's version, in one
        transaction; return how many rows matched.

        ``QuerySet.update()`` neither checks nor bumps a ``VersionedMixin`` model's
        version; this bumps it, so an instance loaded before the update conflicts when
        it is saved (whatever the policy) and ETags change. With ``expected`` (the
        row count you expect, e.g. ``1`` for
        ``filter(pk=…, version=loaded_version)``), any other count rolls the update
        back and raises :class:`~occupy.VersionConflict`.
        """
        from occupy.models.versioned import VersionedMixin

        if not issubclass(self.model, VersionedMixin):
            raise TypeError(
                f"update_versioned() needs a model with VersionedMixin; "
                f"{self.model._meta.label} has no version."
            )
        if "version" in changes:
            raise ValueError("update_versioned() sets version itself; do not pass it.")
        if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int)
                                     or expected < 0):
            raise ValueError(f"expected must be a row count (an int ≥ 0), not {expected!r}.")
        with transaction.atomic(using=self._write_db()):
            count = self.update(version=F("version") + 1, **changes)  # type: ignore[attr-defined]
            if expected is not None and count != expected:
                raise VersionConflict(
                    f"update_versioned() matched {count} {self.model._meta.label} rows, not "
                    f"{expected}: they changed since they were read; nothing was written.",
                    model=self.model, fields=tuple(changes),
                )
        return count

    # --- occupations -------------------------------------------------------------------
    def occupied(self, *, using: str | None = None) -> Any:
        """Return the rows whose lock key ``"<app_label>.<model_name>:<pk>"`` is held now
        on the database backend ``using`` (expired claims count as free)."""
        condition = occupation_filter(self, self._occupy_alias(using))
        return self.filter(condition)  # type: ignore[attr-defined]

    def free(self, *, using: str | None = None) -> Any:
        """Return the rows whose lock key nobody holds now (the complement of
        :meth:`occupied`)."""
        condition = occupation_filter(self, self._occupy_alias(using))
        return self.exclude(condition)  # type: ignore[attr-defined]

    # --- the task pool (seed 004) -------------------------------------------------------
    def claim(
        self, *, owner: str | None = None, ttl: float = DEFAULT,
        order_by: tuple[str, ...] | list[str] | None = None, using: str | None = None,
    ) -> Any:
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
        alias = self._occupy_alias(using)
        rows = occupation_rows(alias, "claim()")
        pool = Pool(self, alias, rows, owner=owner, ttl=ttl, order_by=order_by)
        # Claims of one owner run one at a time (they may come from several requests
        # at once), so that two of them cannot each take a different row.
        with lock(_claim_key(self.model, pool.owner), ttl=30, timeout=30, using=alias):
            return pool.held() or pool.take_next()


class OccupyQuerySet(OccupyQuerySetMixin, models.QuerySet):
    """A ``QuerySet`` with :class:`OccupyQuerySetMixin`."""


class OccupyManager(models.Manager.from_queryset(OccupyQuerySet)):  # type: ignore[misc]
    """The default manager of ``OccupiableMixin`` and ``VersionedMixin`` models."""


def _claim_key(model: type[models.Model], owner: str) -> str:
    key = f"occupy.claim:{lock_model(model)._meta.label_lower}:{owner}"
    if len(key) > 255:  # owners may be long: their digest keeps the key short
        key = f"{key[:180]}#{hashlib.sha256(owner.encode()).hexdigest()}"
    return key


def _lookup_key(model: type[models.Model], lookups: dict[str, Any]) -> str:
    pk = lookups.get("pk", lookups.get(model._meta.pk.name))
    if pk is not None:
        return object_key(model, pk)
    return lock_model(model)._meta.label_lower


def _take_sqlite_write_lock(conn: Any, model: type[models.Model], *, nowait: bool,
                            nested: bool) -> None:
    """Take SQLite's database write lock now, as ``BEGIN IMMEDIATE`` would.

    A statement that writes takes it even when it matches no row. Taken first, it
    serializes the read-modify-write in the block with every other writer, which is
    what a row lock does on the other databases.
    """
    table = conn.ops.quote_name(model._meta.db_table)
    pk = conn.ops.quote_name(model._meta.pk.column)
    with conn.cursor() as cursor:
        if nowait:
            cursor.execute("PRAGMA busy_timeout")
            busy_timeout = cursor.fetchone()[0]
            cursor.execute("PRAGMA busy_timeout = 0")
        try:
            cursor.execute(f"UPDATE {table} SET {pk} = {pk} WHERE 1 = 0")
        except OperationalError as e:
            if nested and not nowait:
                raise transaction.TransactionManagementError(
                    f"locked() could not take SQLite's write lock inside the surrounding "
                    f"transaction, which has read from a database another process wrote "
                    f"to since; call locked() outside any transaction or first in it ({e})."
                ) from e
            raise
        finally:
            if nowait:
                cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout)}")


def _lock_unavailable(vendor: str, error: DatabaseError) -> bool:
    """Return whether ``error`` says a row (or SQLite's database) lock was not free."""
    if vendor == "postgresql":
        return getattr(error.__cause__, "sqlstate", None) == "55P03"
    if vendor == "mysql":
        return bool(error.args) and error.args[0] in (1205, 3572)
    if vendor == "sqlite":
        return "locked" in str(error) or "busy" in str(error)
    return False
