"""What :class:`~occupy.backends.db.DatabaseBackend` and its attempts share, held by the
backend rather than inherited: :class:`DatabaseStore`, the backend's configuration, its
own connections and the statements it runs on them (:mod:`.statements`), its dialect,
the wake-ups it listens for, the store's clock as ORM expressions, and the errors about
a key's fence; and the backend's options. The protocol itself is in :mod:`.backend`
and :mod:`.attempt`, which both use the store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import FieldError
from django.db import DatabaseError, connections, router, transaction
from django.db.models.expressions import RawSQL

from occupy.backends.claims import digest
from occupy.backends.db.checks import no_database
from occupy.backends.db.connections import OwnConnections, borrowing
from occupy.backends.db.dialects import TABLE, Dialect, dialect_for
from occupy.backends.db.rows import farthest_expiry, store_now
from occupy.backends.db.statements import Result, Statements
from occupy.backends.options import Option
from occupy.backends.outcomes import make_holder
from occupy.exceptions import InvalidBackendError, StoreUnavailable
from occupy.keys import ObjectKey, parse_object_key
from occupy.leases import Holder
from occupy.validation import MAX_FENCE

if TYPE_CHECKING:
    from occupy.backends.base import BaseBackend

__all__ = ["OPTIONS", "DatabaseStore"]

#: The database backend's ``OPTIONS``.
OPTIONS = {
    "DATABASE": Option(str, "default", "the database alias"),
    "POLL_INTERVAL": Option(
        float, 0.02, "longest pause between two tries near the head of a queue", positive=True
    ),
    "PENDING_TTL": Option(
        float, 10, "how long a waiter's queued claim outlives its last heartbeat", positive=True
    ),
    "PREPARE": Option(bool, True, "PostgreSQL with psycopg 3: prepare the statements"),
}


class DatabaseStore:
    """Claims as ``Occupation`` rows in a Django database; see
    :class:`~occupy.backends.db.DatabaseBackend`. ``backend`` is the backend that holds
    it (its errors name it), ``options`` that backend's options, checked; raise
    ``InvalidBackendError`` when ``DATABASE`` is not in ``settings.DATABASES``."""

    def __init__(self, backend: BaseBackend, options: Mapping[str, Any]) -> None:
        self.backend = backend
        self.alias = backend.alias
        self.database: str = options["DATABASE"]
        if self.database not in connections.settings:
            raise InvalidBackendError(no_database(self.alias, self.database))
        self.poll_interval = float(options["POLL_INTERVAL"])
        self.pending_ttl = float(options["PENDING_TTL"])
        self.prepare: bool = options["PREPARE"]
        #: Per thread: ``stale_channel``, the channel a granted claim listened on.
        self._local = threading.local()

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
        return Statements(self.backend, self.database, self.dialect, self.own_connections)

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

    def listen(self, channel: str, *, key: str, bound: float | None) -> Any:
        """Listen on ``channel`` on this thread's connection (for a queued claim of
        ``key``, within ``bound`` seconds); return the driver connection that listens: a
        new connection must listen again (see :meth:`await_wake`)."""
        self.execute(self.dialect.listen(channel), [], key=key, bound=bound)
        return self.own_connections.get().wrapper.connection

    def await_wake(
        self, channel: str, listener: Any, seconds: float, *, key: str, bound: float | None
    ) -> Any:
        """Wait at most ``seconds`` for a wake-up on ``channel``, listening again first
        if this thread's driver connection is not ``listener`` (it dropped and was made
        anew); return the driver connection that listens."""
        own = self.own_connections.get()
        if own.wrapper.connection is not listener:
            listener = self.listen(channel, key=key, bound=bound)
        self.dialect.await_wake(own, channel, seconds)
        return listener

    def locked_by_another(self, error: StoreUnavailable) -> bool:
        """Return whether ``error`` is SQLite's write lock held by another writer for the
        statement's whole busy wait (the caller's own transaction is an error of its
        own, which says so)."""
        return self.dialect.is_busy(error.__cause__) and not self.dialect.caller_transaction(
            self.database
        )

    def close(self) -> None:
        """Close the connections the store opened in this process, in every thread."""
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
        return make_holder(owner, expires, fence, sql.to_datetime(since)), remaining

    def describe(self) -> str:
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

        These reads go through Django's connections of the caller's thread; one they
        open is closed again (see :func:`.connections.borrowing`).
        """
        parsed = parse_object_key(key)
        if parsed is None or not apps.is_installed("django.contrib.contenttypes"):
            return None, None
        try:
            model = apps.get_model(parsed.app_label, parsed.model_name)
        except LookupError:
            return None, None
        object_id: str | None = parsed.pk_text
        from django.contrib.contenttypes.models import ContentType

        shortened = parsed.digest is not None
        with borrowing([self.database, *([router.db_for_read(model)] if shortened else [])]):
            if shortened:
                object_id = self._shortened_object_id(model, parsed)
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
