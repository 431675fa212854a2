"""System checks: ``occupy.E00x`` errors and ``occupy.W00x`` warnings.

- ``occupy.E001``: a backend's ``BACKEND`` path cannot be imported or is not a backend.
- ``occupy.E002``: ``settings.OCCUPY`` itself is malformed.
- ``occupy.E003``: a ``DatabaseBackend`` names a database that is not configured.
- ``occupy.W001``: occupy's migration is recorded as applied but the
  ``occupy_occupation`` table is missing (dropped, or a router sends it elsewhere); a
  database check (``check --database``). Before the first ``migrate``, Django's own
  "unapplied migrations" notice already says what to do, so this stays quiet.
- ``occupy.E004``: a ``CacheBackend`` names a cache that is not in ``settings.CACHES``,
  or a ``FileBackend`` has no ``LOCATION``.
- ``occupy.E005``: a ``CacheBackend`` is on a cache that cannot lock across processes:
  ``DummyCache`` (stores nothing) always, ``LocMemCache`` unless its
  ``OPTIONS["SINGLE_PROCESS"]`` says the deployment is one process.
- ``occupy.W002``: a ``CacheBackend`` is on the file or database cache, whose ``add``
  is a read then a write: two processes can both take a free key.
- ``occupy.W003``: a ``FileBackend``'s ``LOCATION`` is a relative path (processes
  started in different directories would lock in different places) or not writable.
- ``occupy.W004``: a ``RedisBackend`` or ``FileBackend`` store holds claims occupy did
  not write (an older layout, another app's values under a shared prefix or in the
  same directory, a torn file); each counts as held by an unknown holder. Finding them
  reads every claim of the store, so like Django's database checks this runs only when
  asked: ``check --database <alias>``.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.cache import caches
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections

from occupy.backends import get_backend, load_backend_class
from occupy.backends.records import UNKNOWN_OWNER
from occupy.conf import occupy_settings
from occupy.exceptions import InvalidBackendError

__all__ = ["check_backends", "check_cache_backends", "check_file_backends",
           "check_foreign_claims", "check_occupation_table"]


def _configured() -> tuple[dict[str, Any], list[Error]]:
    try:
        return occupy_settings.BACKENDS, []
    except InvalidBackendError as e:
        return {}, [Error(str(e), hint="See OCCUPY in occupy's README.", id="occupy.E002")]


def _backends_of(kind: type | tuple[type, ...]) -> dict[str, dict[str, Any]]:
    """Return ``{alias: config}`` of the configured backends that are ``kind`` (a class,
    or a tuple of classes)."""
    found = {}
    for alias, config in _configured()[0].items():
        if not isinstance(config, dict):
            continue
        try:
            cls = load_backend_class(config.get("BACKEND"), alias=alias)
        except InvalidBackendError:
            continue
        if issubclass(cls, kind):
            found[alias] = config
    return found


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


@register(Tags.caches)
def check_cache_backends(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check that every ``CacheBackend`` is on a cache that can hold its locks."""
    from occupy.backends.cache import NO_STORE, ONE_PROCESS, RACY_ADD, CacheBackend, cache_safety

    messages: list[CheckMessage] = []
    for alias, config in _backends_of(CacheBackend).items():
        options = config.get("OPTIONS") or {}
        cache = options.get("CACHE", "default")
        where = f"OCCUPY['BACKENDS'][{alias!r}]"
        if cache not in caches.settings:
            messages.append(Error(
                f"occupy backend {alias!r} uses cache {cache!r}, which is not in "
                "settings.CACHES.",
                hint=f"Set OPTIONS['CACHE'] to one of {sorted(caches.settings)}.",
                obj=where, id="occupy.E004",
            ))
            continue
        path = caches.settings[cache].get("BACKEND", "")
        try:
            kind = cache_safety(path)
        except ImportError:
            continue  # Django's own cache checks report an unimportable cache
        if kind == NO_STORE:
            messages.append(Error(
                f"occupy backend {alias!r} uses cache {cache!r} ({path}), which stores "
                "nothing, so it cannot lock at all, not even within one process.",
                hint="Put the locks on a Redis or memcached cache, or use "
                "occupy.backends.db.DatabaseBackend.",
                obj=where, id="occupy.E005",
            ))
        elif kind == ONE_PROCESS and not options.get("SINGLE_PROCESS"):
            messages.append(Error(
                f"occupy backend {alias!r} uses cache {cache!r} ({path}), which lives in "
                "one process's memory: other processes (workers, servers) never see its "
                "locks.",
                hint="Put the locks on a shared cache (Redis, memcached), or set "
                "OPTIONS['SINGLE_PROCESS'] = True if this deployment is one process.",
                obj=where, id="occupy.E005",
            ))
        elif kind == RACY_ADD:
            messages.append(Warning(
                f"occupy backend {alias!r} uses cache {cache!r} ({path}), whose add() is a "
                "read then a write: two processes can both take a free key.",
                hint="Put the locks on a Redis or memcached cache, or use "
                "occupy.backends.db.DatabaseBackend or occupy.backends.file.FileBackend.",
                obj=where, id="occupy.W002",
            ))
    return messages


@register(Tags.compatibility)
def check_file_backends(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check that every ``FileBackend`` has a usable ``LOCATION``."""
    from occupy.backends.file import FileBackend

    messages: list[CheckMessage] = []
    for alias, config in _backends_of(FileBackend).items():
        location = config.get("LOCATION")
        where = f"OCCUPY['BACKENDS'][{alias!r}]"
        if not isinstance(location, str | os.PathLike) or not os.fspath(location):
            messages.append(Error(
                f"occupy backend {alias!r} (FileBackend) has no LOCATION.",
                hint="Set LOCATION to an absolute path of a directory every process of "
                "the site can write, e.g. '/var/lib/mysite/locks'.",
                obj=where, id="occupy.E004",
            ))
            continue
        location = os.fspath(location)
        if not os.path.isabs(location):
            messages.append(Warning(
                f"occupy backend {alias!r} has the relative LOCATION {location!r}: "
                "processes started in different directories would not see each other's "
                "locks.",
                hint=f"Use an absolute path, e.g. {os.path.abspath(location)!r}.",
                obj=where, id="occupy.W003",
            ))
        existing = os.path.abspath(location)  # the directory, or its nearest ancestor
        while not os.path.exists(existing) and os.path.dirname(existing) != existing:
            existing = os.path.dirname(existing)
        if not (os.path.isdir(existing) and os.access(existing, os.W_OK | os.X_OK)):
            messages.append(Warning(
                f"occupy backend {alias!r} cannot write its LOCATION {location!r} "
                f"({existing!r} is not a directory this process can write).",
                hint="Create the directory and let the site's user write it.",
                obj=where, id="occupy.W003",
            ))
    return messages


def _store_kinds() -> tuple[type, ...]:
    """Return the backend classes whose stores can hold values occupy did not write."""
    from occupy.backends.file import FileBackend

    try:
        from occupy.backends.redis import RedisBackend
    except InvalidBackendError:  # django-redis is not installed: no Redis backend
        return (FileBackend,)
    return (FileBackend, RedisBackend)


@register(Tags.database)
def check_foreign_claims(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[Warning]:
    """Warn about claims occupy did not write in a Redis or file backend's store."""
    if not databases:
        return []  # it reads every claim of the stores: only on ``check --database``
    warnings = []
    for alias in _backends_of(_store_kinds()):
        where = f"OCCUPY['BACKENDS'][{alias!r}]"
        try:
            found = [c.key for c in get_backend(alias).claims()
                     if c.owner == UNKNOWN_OWNER and c.since is None]
        except Exception as e:  # a store that cannot be read is no reason to stop a check
            warnings.append(Warning(f"Could not look for claims occupy did not write in "
                                    f"backend {alias!r}: {e}", obj=where, id="occupy.W004"))
            continue
        if found:
            shown = ", ".join(repr(name) for name in found[:3])
            more = f" and {len(found) - 3} more" if len(found) > 3 else ""
            warnings.append(Warning(
                f"occupy backend {alias!r} has {len(found)} claim(s) occupy did not write: "
                f"{shown}{more}. Each is held by an unknown holder until it expires.",
                hint="Give occupy a PREFIX (Redis) or LOCATION (files) of its own; "
                "sweep_locks removes expired claim files, and Redis drops values when "
                "they expire (delete those without an expiry by hand).",
                obj=where, id="occupy.W004",
            ))
    return warnings
