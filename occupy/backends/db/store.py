"""What :class:`~occupy.backends.db.DatabaseBackend` and its attempts share:
:class:`DatabaseStore`, the backend's configuration, its own connections and the
statements it runs on them (:mod:`.statements`), its dialect, the wake-ups it listens
for, the store's clock as ORM expressions, and the errors about a key's fence. The
protocol itself is in :mod:`.backend` and :mod:`.attempt`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import cached_property
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error
from django.core.exceptions import FieldError
from django.db import DatabaseError, connections, router, transaction
from django.db.models.expressions import RawSQL

from occupy.backends.base import BaseBackend
from occupy.backends.claims import digest
from occupy.backends.db.checks import no_database, occupation_table_warnings
from occupy.backends.db.connections import OwnConnections
from occupy.backends.db.dialects import TABLE, Dialect, dialect_for
from occupy.backends.db.rows import farthest_expiry, store_now
from occupy.backends.db.statements import Result, Statements
from occupy.backends.options import Option, where
from occupy.exceptions import InvalidBackendError, StoreUnavailable
from occupy.keys import ObjectKey, parse_object_key
from occupy.leases import Holder
from occupy.validation import MAX_FENCE

__all__ = ["DatabaseStore"]


class DatabaseStore(BaseBackend):
    """Claims as ``Occupation`` rows in a Django database; see
    :class:`~occupy.backends.db.DatabaseBackend`."""

    options_schema = {
        "DATABASE": Option(str, "default", "the database alias"),
        "POLL_INTERVAL": Option(
            float, 0.02, "longest pause between two tries near the head of a queue", positive=True
        ),
        "PENDING_TTL": Option(
            float, 10, "how long a waiter's queued claim outlives its last heartbeat", positive=True
        ),
        "PREPARE": Option(bool, True, "PostgreSQL with psycopg 3: prepare the statements"),
    }

    expires_by_itself = False

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.database: str = self.options["DATABASE"]
        if self.database not in connections.settings:
            raise InvalidBackendError(no_database(alias, self.database))
        self.poll_interval = float(self.options["POLL_INTERVAL"])
        self.pending_ttl = float(self.options["PENDING_TTL"])
        self.prepare: bool = self.options["PREPARE"]
        #: Per thread: ``stale_channel``, the channel a granted claim listened on.
        self._local = threading.local()

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.E003``: ``OPTIONS["DATABASE"]`` is not in ``settings.DATABASES``."""
        messages = super().check(alias, params)
        database = (params.get("OPTIONS") or {}).get("DATABASE", "default")
        if isinstance(database, str) and database not in connections.settings:
            messages.append(
                Error(
                    no_database(alias, database),
                    hint=f"Set OPTIONS['DATABASE'] to one of {sorted(connections.settings)}.",
                    obj=where(alias),
                    id="occupy.E003",
                )
            )
        return messages

    def check_store(self, databases: Collection[str]) -> list[CheckMessage]:
        """Add ``occupy.W001`` (the claims table is missing though occupy's migration is
        recorded as applied), ``occupy.W006`` (occupy's migration was never applied) and
        ``occupy.W007`` (the database cannot be reached): ``check --database``."""
        if self.database not in databases:
            return []
        try:
            return occupation_table_warnings(self.alias, self.database)
        except DatabaseError as e:
            return [self.unreachable_store(e)]

    # --- the parts ----------------------------------------------------------------------
    @cached_property
    def dialect(self) -> Dialect:
        """Return the SQL dialect of the configured database."""
        return dialect_for(connections[self.database].vendor)

    @cached_property
    def hears_wake_ups(self) -> bool:
        """Return whether this backend's waiters listen for wake-ups (PostgreSQL with a
        driver that can wait for them); else they poll."""
        return self.dialect.wakes_waiters and self.dialect.hears_notifications()

    @cached_property
    def own_connections(self) -> OwnConnections:
        """Return the backend's own connections (see :mod:`.connections`)."""
        return OwnConnections(self.database, self.dialect, prepare=self.prepare)

    @cached_property
    def statements(self) -> Statements:
        """Return what runs the backend's statements (see :mod:`.statements`)."""
        return Statements(self, self.database, self.dialect, self.own_connections)

    def execute(
        self,
        sql: str,
        params: Sequence[Any],
        *,
        key: str | None = None,
        prepare: bool = True,
        settled: Callable[[], Result | None] | None = None,
        bound: float | None = None,
    ) -> Result:
        """Run one autocommit statement; return ``(rowcount, rows)`` (see
        :meth:`Statements.execute`)."""
        return self.statements.execute(
            sql, params, key=key, prepare=prepare, settled=settled, bound=bound
        )

    def unlisten_later(self, channel: str) -> None:
        """Leave ``channel``, which a claim granted in this thread listened on, to
        :meth:`forget_listen`."""
        self._local.stale_channel = channel

    def forget_listen(self) -> None:
        """Stop listening on the channel a claim granted in this thread listened on.

        Left for after the release, so that a waiter's grant costs no extra round trip
        before its holder starts work; a stale channel is never notified (its claim is
        granted, and only queued claims are woken).
        """
        channel = getattr(self._local, "stale_channel", None)
        if channel is not None:
            self._local.stale_channel = None
            self.execute(self.dialect.unlisten(channel), [])

    def close(self) -> None:
        """Close the connections this backend opened in this process, in every thread."""
        own = self.__dict__.get("own_connections")  # made on first use only
        if own is not None:
            own.close()
        self._local = threading.local()

    def close_if_unusable_or_obsolete(self) -> None:
        """Close this thread's connection if it is unusable or older than the
        database's ``CONN_MAX_AGE`` (at the start and end of a request)."""
        own = self.__dict__.get("own_connections")
        if own is not None:
            own.close_if_unusable_or_obsolete()

    def refuse_exhausted_fence(self, key: str) -> None:
        """Raise :class:`~occupy.exceptions.StoreUnavailable` if the claims table records
        a fence for ``key`` above which no fence exists (see :meth:`fence_exhausted`)."""
        top = self.execute(self.dialect.top_fence(), [digest(key)], key=key)[1]
        if top and top[0][0] is not None and int(top[0][0]) >= MAX_FENCE:
            raise self.fence_exhausted(key, int(top[0][0]))

    def fence_exhausted(self, key: str, fence: int) -> StoreUnavailable:
        """Return the error for a key whose recorded fence cannot rise any more."""
        return StoreUnavailable(
            f"occupy backend {self.alias!r} cannot hand out a fence for {key!r}: table "
            f"{TABLE!r} records fence {fence} for it, and a fence cannot exceed "
            f"{MAX_FENCE} (2^63 - 1; occupy never writes one so high: a restored "
            "snapshot, a hand edit or another program did). No grant or takeover is made "
            "until the key's rows are gone: sweep_locks removes them once expired, or "
            f"delete them (DELETE FROM {TABLE} WHERE {self.dialect.quote}key"
            f"{self.dialect.quote} = <the key>). Fences then restart from the database "
            "clock, below the recorded one: storage that compares fences must forget it.",
            key=key,
            backend=self.alias,
        )

    def holder_and_remaining(self, key: str) -> tuple[Holder, float] | None:
        """Return the live ``using`` claim's holder and its seconds left by the
        database's clock, or ``None``."""
        sql = self.dialect
        rows = self.execute(sql.holder(), [digest(key)], key=key)[1]
        if not rows:
            return None
        owner, expires_at, fence, since, now = rows[0]
        expires = sql.to_datetime(expires_at)
        remaining = (expires - sql.to_datetime(now)).total_seconds()
        return self.make_holder(owner, expires, fence, sql.to_datetime(since)), remaining

    def describe_store(self) -> str:
        """Return the database, its vendor and where it is."""
        settings_dict = connections.settings[self.database]
        host = settings_dict.get("HOST") or "localhost"
        port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
        where_ = (
            f"file {settings_dict.get('NAME')}"
            if self.dialect.vendor == "sqlite"
            else f"{settings_dict.get('NAME')!r} at {host}{port}"
        )
        return f"database {self.database!r} ({self.dialect.vendor}, {where_})"

    def store_fix(self) -> str:
        """Return what to check when the database cannot be used."""
        return (
            f"check that the database server answers and that settings.DATABASES"
            f"[{self.database!r}] is right"
        )

    def now(self) -> RawSQL:
        """Return the store's now as an ORM expression (see :func:`.rows.store_now`)."""
        return store_now(self.dialect)

    def farthest(self) -> RawSQL:
        """Return the latest expiry a claim of occupy's may have, as an ORM expression
        (see :func:`.rows.farthest_expiry`)."""
        return farthest_expiry(self.dialect)

    def object_of(self, key: str) -> tuple[int | None, str | None]:
        """Return the content type id and object id a row's key names (see
        :mod:`occupy.keys`), or ``(None, None)`` for a key that names no row.

        A shortened key carries only the start of the primary key and its digest: the
        row is looked up by that start and told by the digest (one query, for such keys
        only). A row that cannot be found (deleted, a composite primary key) leaves the
        claim unlinked: it locks all the same, but ``occupied()``, ``free()`` and the
        admin's status column do not see it.
        """
        parsed = parse_object_key(key)
        if parsed is None or not apps.is_installed("django.contrib.contenttypes"):
            return None, None
        try:
            model = apps.get_model(parsed.app_label, parsed.model_name)
        except LookupError:
            return None, None
        object_id: str | None = parsed.pk_text
        if parsed.digest is not None:
            object_id = self._shortened_object_id(model, parsed)
        from django.contrib.contenttypes.models import ContentType

        try:
            content_type = ContentType.objects.db_manager(self.database).get_for_model(model)
        except DatabaseError as e:
            raise self.statements.failure(key, e) from e
        return content_type.pk, object_id

    def _shortened_object_id(self, model: Any, parsed: ObjectKey) -> str | None:
        """Return the primary key, as text, of the row of ``model`` a shortened key
        names, or ``None`` when no row matches: looked for in the claims' database, then
        in the one the router reads ``model`` from."""
        for database in dict.fromkeys([self.database, router.db_for_read(model)]):
            rows = model._base_manager.db_manager(database)
            try:
                # In a savepoint: a table missing there must not break the caller's
                # transaction on that database.
                with transaction.atomic(using=database):
                    candidates = list(
                        rows.filter(pk__startswith=parsed.pk_text).values_list("pk", flat=True)
                    )
                found = next((str(pk) for pk in candidates if parsed.matches(pk)), None)
            except (FieldError, TypeError, ValueError):
                return None  # a primary key that cannot be looked up by its start
            except DatabaseError:
                continue  # the model has no table in that database
            if found is not None:
                return found
        return None
