"""What ``manage.py check`` says about a database backend's configuration and table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.checks import CheckMessage, Error, Warning
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from occupy.backends.db.dialects import TABLE
from occupy.backends.options import where

__all__ = [
    "database_errors",
    "migrate_hint",
    "migration_recorded",
    "no_database",
    "occupation_table_warnings",
]


def no_database(alias: str, database: str) -> str:
    """Return the message for a backend whose ``DATABASE`` is not configured."""
    return (
        f"occupy backend {alias!r} uses database {database!r}, which is not in "
        f"settings.DATABASES ({sorted(connections.settings)})."
    )


def database_errors(alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
    """Return ``occupy.E003`` when ``OPTIONS["DATABASE"]`` of ``params`` (backend
    ``alias``'s configuration) is not in ``settings.DATABASES``."""
    database = (params.get("OPTIONS") or {}).get("DATABASE", "default")
    if not isinstance(database, str) or database in connections.settings:
        return []
    return [
        Error(
            no_database(alias, database),
            hint=f"Set OPTIONS['DATABASE'] to one of {sorted(connections.settings)}.",
            obj=where(alias),
            id="occupy.E003",
        )
    ]


def migration_recorded(connection: BaseDatabaseWrapper) -> bool:
    """Return whether occupy's migration is recorded as applied in the database of
    ``connection`` (asked on that very connection, whichever it is)."""
    from django.db.migrations.recorder import MigrationRecorder

    recorder = MigrationRecorder(connection)
    if not recorder.has_table():
        return False
    table = connection.ops.quote_name(recorder.Migration._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} WHERE app = %s", ["occupy"])
        return cursor.fetchone() is not None


def migrate_hint(database: str, *, recorded: bool) -> str:
    """Return what to run so that ``database`` gets occupy's claims table: its
    migration, or where that is recorded as applied already (the table was dropped),
    the record undone first."""
    migrate = f"'python manage.py migrate occupy --database {database}'"
    if not recorded:
        return f"Run {migrate}."
    return (
        "Record the migration as unapplied, then apply it: 'python manage.py "
        f"migrate occupy zero --fake --database {database}', then {migrate}."
    )


def occupation_table_warnings(alias: str, database: str) -> list[CheckMessage]:
    """Return ``occupy.W001`` when ``database`` has no claims table although occupy's
    migration is recorded as applied there (the table was dropped, or a router sends it
    elsewhere), ``occupy.W006`` when occupy's migration was never applied there, while
    others were. A database where nothing was ever migrated gets neither: that is a new
    project, whose ``migrate`` (which runs these checks first) is about to create the
    table, and Django itself reports its unapplied migrations. A database that cannot be
    reached raises ``DatabaseError``: the backend reports it (``occupy.W007``)."""
    from django.db.migrations.recorder import MigrationRecorder

    if database not in connections.settings:
        return []
    with connections[database].cursor() as cursor:
        tables = connections[database].introspection.table_names(cursor)
    if TABLE in tables or MigrationRecorder.Migration._meta.db_table not in tables:
        return []
    if not migration_recorded(connections[database]):
        return [
            Warning(
                f"occupy's migration was never applied to database {database!r}, so occupy "
                f"backend {alias!r} cannot take locks there.",
                hint=migrate_hint(database, recorded=False),
                obj=where(alias),
                id="occupy.W006",
            )
        ]
    return [
        Warning(
            f"Database {database!r} has no {TABLE} table, although occupy's migration "
            f"is recorded as applied there, so occupy backend {alias!r} cannot take locks.",
            hint=(
                f"{migrate_hint(database, recorded=True)} If a database router sends "
                "occupy elsewhere, point OPTIONS['DATABASE'] there instead."
            ),
            obj=where(alias),
            id="occupy.W001",
        )
    ]
