"""Row locks: :func:`locked_rows`, a transaction holding ``SELECT … FOR UPDATE``; the
queryset method ``locked()`` (:class:`~occupy.models.querysets.RowLockQuerySetMixin`)
runs it::

    class Goods(models.Model):
        objects = RowLockManager()

    with Goods.objects.locked(pk=3) as goods:
        goods.count -= 1
        goods.save(update_fields=["count"])

Row locks are the database's own, so no model mixin is needed; the database is the
queryset's own (``Goods.objects.using("other").locked(…)``).
"""

from __future__ import annotations

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
from django.db.backends.base.base import BaseDatabaseWrapper

from occupy.exceptions import Occupied
from occupy.models.keys import lock_model, object_key, pk_fields

__all__ = ["locked_rows"]


@contextmanager
def locked_rows(
    rows: models.QuerySet[Any],
    *args: Any,
    nowait: bool = False,
    skip_locked: bool = False,
    of: tuple[str, ...] = (),
    **kwargs: Any,
) -> Iterator[Any]:
    """Do the work of ``locked()`` on the queryset ``rows``: see
    :meth:`~occupy.models.querysets.RowLockQuerySetMixin.locked`."""
    if nowait and skip_locked:
        raise ValueError("locked() takes nowait or skip_locked, not both.")
    # select_for_update() marks a clone "for write", so .db is the router's write db.
    db = rows.select_for_update().db
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
        queryset = rows.select_for_update(nowait=nowait, skip_locked=skip_locked, of=of)
    elif conn.vendor == "sqlite":
        queryset = rows.using(db)
    else:
        raise NotSupportedError(
            f"locked() needs row locks (SELECT … FOR UPDATE), which the "
            f"{conn.display_name} database {db!r} does not have."
        )
    nested = conn.in_atomic_block
    with transaction.atomic(using=db):
        try:
            if not features.has_select_for_update:
                _take_sqlite_write_lock(conn, rows.model, nowait=nowait, nested=nested)
            if skip_locked:
                instance = queryset.filter(*args, **kwargs).first()
            else:
                instance = queryset.get(*args, **kwargs)
        except DatabaseError as e:
            if nowait and _lock_unavailable(conn.vendor, e):
                key = _lookup_key(rows.model, kwargs)
                raise Occupied(
                    f"{key!r} is locked by another transaction; try again later.",
                    key=key,
                ) from e
            raise
        yield instance


def _lookup_key(model: type[models.Model], lookups: dict[str, Any]) -> str:
    pk = lookups.get("pk", lookups.get(model._meta.pk.name))
    if pk is not None:
        return object_key(model, pk)
    return lock_model(model)._meta.label_lower


def _take_sqlite_write_lock(
    conn: BaseDatabaseWrapper, model: type[models.Model], *, nowait: bool, nested: bool
) -> None:
    """Take SQLite's database write lock now, as ``BEGIN IMMEDIATE`` would.

    A statement that writes takes it even when it matches no row. Taken first, it
    serializes the read-modify-write in the block with every other writer, which is
    what a row lock does on the other databases.
    """
    table = conn.ops.quote_name(model._meta.db_table)
    # Any column will do; the first of a composite primary key's (which has none itself).
    column = pk_fields(model)[0].column
    assert column is not None  # a primary key's fields are concrete: they have columns
    pk = conn.ops.quote_name(column)
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
