"""``OccupiedWritesMixin``: writes never land inside someone else's edit lease, and a
write in flight is waited for, not blamed on an editor (see
:mod:`occupy.rest_framework.mixins`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from django.core.checks import CheckMessage
from django.db import router, transaction
from rest_framework.request import Request

import occupy
from occupy import http, telemetry
from occupy.api import holds_for_transaction
from occupy.checks import Rule, attribute_errors, checked_attribute, optional
from occupy.conf import occupy_settings
from occupy.exceptions import FencedOut, LeaseLost, Occupied
from occupy.http import Problem, requester_pk
from occupy.leases import Lease, TransactionHold
from occupy.owners import lease_owner, parse_owner, same_user, write_owner
from occupy.rest_framework.errors import OccupyErrorsMixin
from occupy.rest_framework.exceptions import from_problem
from occupy.validation import check_client, check_token, check_ttl, check_write_wait

#: What a write lock is held as: a lease, or a hold of the write's transaction.
HeldT = TypeVar("HeldT", Lease, TransactionHold)

__all__ = ["OccupiedWritesMixin"]

if TYPE_CHECKING:
    from rest_framework.viewsets import ModelViewSet

    _ModelViewSet = ModelViewSet[Any]
else:
    _ModelViewSet = object


class OccupiedWritesMixin(OccupyErrorsMixin, _ModelViewSet):
    """Writes never happen inside someone else's edit lease.

    A write that carries ``Occupy-Lease: <token>`` runs under that lease: the store
    checks the token, the lease must be the requesting user's own (another user's
    token gets 409 and the lease is left alone), and the save is fenced by it
    (``FencedMixin`` models) in a transaction that last confirms the lease is still
    held. A write without a token holds the object's key itself for the length of the
    write (a *write lock*), so "is someone editing it?" and the write are one critical
    section. Where the leases live in the database the model writes to, on PostgreSQL,
    the write lock is held by the write's own transaction (``occupy.lock(key,
    scope="transaction")``: one statement, no commit of its own, released by the
    write's commit); elsewhere it is a lease of owner ``write:user:<pk>``.

    A write lock is not an edit lease: a write that finds another request's write in
    flight waits for it, first come first served, up to ``write_wait`` seconds
    (``OCCUPY["REST_FRAMEWORK"]["WRITE_WAIT"]``, 2 by default). Only an edit lease, or a
    write lock held past that wait, answers 423, with ``Retry-After`` = the holder's
    remaining time, and a person named only when that person holds an edit lease.
    Deleting an object under its edit lease releases the lease.
    """

    #: The occupy backend alias of the leases and write locks; ``None`` (the default):
    #: the model's ``occupy_backend``, the store ``obj.occupy()`` locks the object in.
    occupy_backend: str | None = None
    #: How long a write without a lease may hold the key, in seconds.
    write_ttl: float = 30
    #: How long a write waits for another write in flight (default: the setting).
    write_wait: float | None = None

    #: The durations a view reads, each with the rule its value follows
    #: (:meth:`occupy_checks` reports a value it refuses as ``occupy.E304``).
    occupy_durations: ClassVar[dict[str, Rule]] = {
        "write_ttl": check_ttl,
        "write_wait": optional(check_write_wait),
    }

    @classmethod
    def occupy_checks(cls) -> list[CheckMessage]:
        """Return the system check messages of the view's occupy attributes (run for
        the views of the URLconf): ``occupy.E302``, its ``occupy_backend`` is not
        configured; ``occupy.W303``, it names another alias than the model's;
        ``occupy.E304``, a duration it reads is not one."""
        from occupy.models.stores import backend_checks

        model = getattr(getattr(cls, "queryset", None), "model", None)
        return [
            *backend_checks(cls, model, check_id="occupy.E302"),
            *attribute_errors(cls, cls.occupy_durations),
        ]

    def get_occupy_backend(self) -> str:
        """Return the occupy backend alias that locks the view's objects: its own
        ``occupy_backend``, else the model's; :class:`~occupy.Misconfigured` (a 503)
        when it is not configured."""
        from occupy.models.stores import configured_backend

        return configured_backend(self, self.get_queryset().model)

    def get_write_ttl(self) -> float:
        """Return how long a write without a lease may hold the key, in seconds."""
        seconds: float = checked_attribute(self, "write_ttl", self.occupy_durations["write_ttl"])
        return seconds

    def get_write_wait(self) -> float:
        """Return how long a write waits for another request's write, in seconds."""
        wait = checked_attribute(self, "write_wait", self.occupy_durations["write_wait"])
        if wait is not None:
            return float(wait)
        return float(occupy_settings.REST_FRAMEWORK["WRITE_WAIT"])

    def get_lease_key(self, instance: Any) -> str:
        """Return the lock key of ``instance`` (its ``occupy_key``, else ``app.model:pk``);
        400 ``invalid_key`` when none can be built from its primary key."""
        from occupy.models import object_key

        try:
            key = getattr(instance, "occupy_key", None)
            return key if key is not None else object_key(type(instance), instance.pk)
        except ValueError as e:
            raise from_problem(http.unlockable(e)) from e

    def get_lease_owner(self, request: Request, ttl: float | None = None) -> str:
        """Return the owner of an edit lease taken for ``request``: ``user:<pk>``, with
        the lease's ``ttl``, and the client's name from ``Occupy-Client`` (see
        :mod:`occupy.owners`); 400 ``invalid_client`` for a name with control
        characters."""
        header = occupy_settings.REST_FRAMEWORK["CLIENT_HEADER"]
        client = request.headers.get(header)
        if client:
            try:
                check_client(client, name=header)
            except ValueError as e:
                raise from_problem(http.invalid_client(header, e)) from e
        return lease_owner(requester_pk(request), ttl=ttl, client=client or None)

    def get_write_owner(self, request: Request) -> str:
        """Return the owner of the write lock a write without a lease holds."""
        return write_owner(requester_pk(request))

    def get_lease_token(self, request: Request) -> str | None:
        """Return the lease token the request presents (header), or ``None``; raise
        400 for a header that cannot be a token."""
        token = request.headers.get(occupy_settings.REST_FRAMEWORK["LEASE_HEADER"])
        return None if not token else _checked_token(token)

    def own_lease(self, key: str, token: str) -> Lease:
        """Return the lease ``token`` holds on ``key`` if the requesting user took it;
        409 ``lease_lost`` if the token is another user's (that lease is left as it is);
        :class:`~occupy.LeaseLost` if it holds nothing."""
        # ttl=1 keeps the lease at least one second: never shortened, hardly extended.
        lease = occupy.resume(key, token, ttl=1, backend=self.get_occupy_backend())
        if not same_user(lease.owner, requester_pk(self.request)):
            raise from_problem(http.lease_not_yours())
        return lease

    def take_write_lock(self, key: str) -> Lease:
        """Hold ``key`` for one write: at once when it is free, after another write in
        flight (up to :meth:`get_write_wait`), else raise
        :class:`~occupy.Occupied` (an edit lease, or a write held past the wait)."""
        owner = self.get_write_owner(self.request)
        alias = self.get_occupy_backend()
        ttl = self.get_write_ttl()
        return self._after_writes_in_flight(
            lambda timeout: occupy.acquire(
                key, owner=owner, ttl=ttl, timeout=timeout, reentrant=False, backend=alias
            )
        )

    def _after_writes_in_flight(self, take: Callable[[float], HeldT]) -> HeldT:
        """Return ``take(timeout)``: at once (``0``), else, when the key is held by
        another write in flight, after waiting for it up to :meth:`get_write_wait`;
        :class:`~occupy.Occupied` at once for an edit lease (no use waiting for a lease
        of minutes) or when writes may not wait."""
        try:
            return take(0)
        except Occupied as e:
            wait = self.get_write_wait()
            if (e.holder is not None and not parse_owner(e.holder.owner).write) or not wait:
                raise
        return take(wait)

    def write_database(self, instance: Any) -> str | None:
        """Return the database alias a write of ``instance`` goes to when the write
        lock can be held by the write's own transaction there, else ``None``."""
        database = router.db_for_write(type(instance), instance=instance)
        return database if holds_for_transaction(self.get_occupy_backend(), database) else None

    def hold_write_lock(self, key: str) -> TransactionHold:
        """Hold ``key`` for the open transaction of the write, as :meth:`take_write_lock`
        holds it as a lease: another write in flight is waited for (up to
        :meth:`get_write_wait`), an edit lease raises :class:`~occupy.Occupied` at once."""
        self.get_write_ttl()  # unused here, but a view misconfigured answers alike everywhere
        alias = self.get_occupy_backend()

        def hold(timeout: float) -> TransactionHold:
            with occupy.lock(key, scope="transaction", timeout=timeout, backend=alias) as held:
                return held

        return self._after_writes_in_flight(hold)

    @staticmethod
    def _lease_length(lease: Lease) -> float:
        """Return how long a write under ``lease`` keeps it from now: its own ttl, as a
        renewal naming none does (else the ``LEASE_TTL`` setting). Never the write
        lock's ``write_ttl``: the others are told to retry after the lease, and a client
        that asked for seconds is not named as editing for half a minute."""
        own = parse_owner(lease.owner).ttl
        return own if own is not None else float(occupy_settings.REST_FRAMEWORK["LEASE_TTL"])

    @contextmanager
    def occupy_write(self, instance: Any) -> Iterator[Lease | TransactionHold]:
        """Hold the object's key (or the presented lease) around a write."""
        key = self.get_lease_key(instance)
        token = self.get_lease_token(self.request)
        database = None if token is not None else self.write_database(instance)
        if database is not None:
            with transaction.atomic(using=database):
                with telemetry.write_lock():  # an event on the request's span, not spans
                    hold = self.hold_write_lock(key)
                yield hold
            return
        if token is None:
            with telemetry.write_lock():  # an event on the request's span, not spans
                lease = self.take_write_lock(key)
            try:
                yield lease
            finally:
                # A write lock outlived by its write: the row's own guard still decided.
                with suppress(LeaseLost):
                    occupy.release(lease)
            return
        try:
            lease = self.own_lease(key, token)
            lease = occupy.resume(
                key, token, ttl=self._lease_length(lease), backend=self.get_occupy_backend()
            )
        except LeaseLost as e:  # taken over or expired: this write is fenced out
            raise FencedOut(
                f"The edit lease on {key!r} is no longer held; nothing was written.",
                model=type(instance),
                pk=instance.pk,
                key=key,
            ) from e
        use_lease = getattr(instance, "use_lease", None)
        if use_lease is not None:
            use_lease(lease)
        database = router.db_for_write(type(instance), instance=instance)
        with transaction.atomic(using=database):
            yield lease
            if holds_for_transaction(self.get_occupy_backend(), database):
                # The transaction holds the key while the lease is the key's live one,
                # up to its commit: no takeover is granted in between.
                with occupy.lock(
                    key,
                    scope="transaction",
                    lease=lease,
                    timeout=self.get_write_wait(),
                    backend=self.get_occupy_backend(),
                ):
                    pass
            else:
                lease.ensure_held()

    def perform_update(self, serializer: Any) -> None:
        """Save under the object's key or the presented lease."""
        with self.occupy_write(serializer.instance):
            super().perform_update(serializer)

    def perform_destroy(self, instance: Any) -> None:
        """Delete under the object's key or the presented lease; a lease the delete ran
        under is released (there is nothing left to edit)."""
        with self.occupy_write(instance) as lease:
            super().perform_destroy(instance)
        if isinstance(lease, Lease) and not parse_owner(lease.owner).write:
            with suppress(LeaseLost):
                occupy.release(lease)


def _checked_token(token: Any) -> str:
    try:
        return check_token(token)
    except (TypeError, ValueError) as e:
        raise from_problem(Problem(400, "malformed_precondition", str(e))) from e
