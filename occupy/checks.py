"""System checks: ``occupy.E00x`` errors and ``occupy.W00x`` warnings.

- ``occupy.E001``: a backend's ``BACKEND`` path cannot be imported or is not a backend.
- ``occupy.E002``: ``settings.OCCUPY`` itself is malformed.
- ``occupy.E003``: a ``DatabaseBackend`` names a database that is not configured.
- ``occupy.W001``: occupy's migration is recorded as applied but the
  ``occupy_occupation`` table is missing (dropped, or a router sends it elsewhere); a
  database check (``check --database``). Before the first ``migrate``, Django's own
  "unapplied migrations" notice already says what to do, so this stays quiet.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError, connections

from occupy.backends import load_backend_class
from occupy.conf import occupy_settings
from occupy.exceptions import InvalidBackendError

__all__ = ["check_backends", "check_occupation_table"]


def _configured() -> tuple[dict[str, Any], list[Error]]:
    try:
        return occupy_settings.BACKENDS, []
    except InvalidBackendError as e:
        return {}, [Error(str(e), hint="See OCCUPY in occupy's README.", id="occupy.E002")]


def _database_backends() -> dict[str, str]:
    """Return ``{backend alias: database alias}`` for every DatabaseBackend configured."""
    from occupy.backends.db import DatabaseBackend

    found = {}
    for alias, config in _configured()[0].items():
        try:
            cls = load_backend_class(config.get("BACKEND"), alias=alias)
        except (InvalidBackendError, AttributeError):
            continue
        if issubclass(cls, DatabaseBackend):
            found[alias] = (config.get("OPTIONS") or {}).get("DATABASE", "default")
    return found


@register(Tags.compatibility)
def check_backends(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Check that every configured backend can be loaded and points at something real."""
    backends, errors = _configured()
    for alias, config in backends.items():
        if not isinstance(config, dict):
            errors.append(Error(f"OCCUPY['BACKENDS'][{alias!r}] must be a dict.",
                                id="occupy.E002"))
            continue
        try:
            load_backend_class(config.get("BACKEND"), alias=alias)
        except InvalidBackendError as e:
            errors.append(Error(
                str(e),
                hint="Use one of occupy.backends.db.DatabaseBackend, "
                "occupy.backends.redis.RedisBackend, occupy.backends.cache.CacheBackend, "
                "occupy.backends.file.FileBackend, or your own BaseBackend subclass.",
                obj=f"OCCUPY['BACKENDS'][{alias!r}]",
                id="occupy.E001",
            ))
    for alias, database in _database_backends().items():
        if database not in connections.settings:
            errors.append(Error(
                f"occupy backend {alias!r} uses database {database!r}, which is not in "
                "settings.DATABASES.",
                hint=f"Set OPTIONS['DATABASE'] to one of {sorted(connections.settings)}.",
                obj=f"OCCUPY['BACKENDS'][{alias!r}]",
                id="occupy.E003",
            ))
    return errors


def _migrated(database: str) -> bool:
    from django.db.migrations.recorder import MigrationRecorder

    recorder = MigrationRecorder(connections[database])
    return recorder.has_table() and recorder.migration_qs.filter(app="occupy").exists()


@register(Tags.database)
def check_occupation_table(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[Warning]:
    """Warn when a database that holds locks has no ``occupy_occupation`` table."""
    warnings = []
    for alias, database in _database_backends().items():
        if not databases or database not in databases or database not in connections.settings:
            continue
        try:
            with connections[database].cursor() as cursor:
                tables = connections[database].introspection.table_names(cursor)
        except DatabaseError as e:
            warnings.append(Warning(f"Could not look for the occupy_occupation table in "
                                    f"database {database!r}: {e}", id="occupy.W001"))
            continue
        if "occupy_occupation" not in tables and _migrated(database):
            warnings.append(Warning(
                f"Database {database!r} has no occupy_occupation table, so occupy backend "
                f"{alias!r} cannot take locks.",
                hint=f"Run 'python manage.py migrate occupy --database {database}'.",
                id="occupy.W001",
            ))
    return warnings
