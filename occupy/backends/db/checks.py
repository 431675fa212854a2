"""What ``manage.py check`` says about a database backend's configuration and table."""

from __future__ import annotations

from django.core.checks import CheckMessage, Warning
from django.db import DatabaseError, connections

from occupy.backends.options import where

__all__ = ["TABLE_NAME", "no_database", "occupation_table_warnings"]

TABLE_NAME = "occupy_occupation"


def no_database(alias: str, database: str) -> str:
    """Return the message for a backend whose ``DATABASE`` is not configured."""
    return (f"occupy backend {alias!r} uses database {database!r}, which is not in "
            f"settings.DATABASES ({sorted(connections.settings)}).")


def _migrated(database: str) -> bool:
    from django.db.migrations.recorder import MigrationRecorder

    recorder = MigrationRecorder(connections[database])
    return recorder.has_table() and recorder.migration_qs.filter(app="occupy").exists()


def occupation_table_warnings(alias: str, database: str) -> list[CheckMessage]:
    """Return ``occupy.W001`` when ``database`` has no claims table although occupy's
    migration is recorded as applied there (the table was dropped, or a router sends it
    elsewhere). Before the first ``migrate``, Django's own "unapplied migrations"
    notice already says what to do, so this stays quiet then."""
    if database not in connections.settings:
        return []
    try:
        with connections[database].cursor() as cursor:
            tables = connections[database].introspection.table_names(cursor)
    except DatabaseError as e:
        return [Warning(f"Could not look for the {TABLE_NAME} table in database "
                        f"{database!r}: {e}", obj=where(alias), id="occupy.W001")]
    if TABLE_NAME in tables or not _migrated(database):
        return []
    return [Warning(
        f"Database {database!r} has no {TABLE_NAME} table, although occupy's migration "
        f"is recorded as applied there, so occupy backend {alias!r} cannot take locks.",
        hint=("Record the migration as unapplied, then apply it: 'python manage.py "
              f"migrate occupy zero --fake --database {database}', then 'python manage.py "
              f"migrate occupy --database {database}'. If a database router sends occupy "
              "elsewhere, point OPTIONS['DATABASE'] there instead."),
        obj=where(alias), id="occupy.W001",
    )]
