"""What ``occupied()``, ``free()`` and ``claim()`` read: the database backend's live
``Occupation`` rows of a model, and the task pool built on them.

The database backend fills an ``Occupation``'s content type and object id (as text)
for keys of the form ``"<app_label>.<model_name>:<pk>"``; a live claim is one in state
``using`` whose ``expires_at`` is still ahead of the database's clock.
"""

from __future__ import annotations

from typing import Any

from django.db import connections, models, transaction
from django.db.models import Exists, Q, TextField, Value
from django.db.models.functions import Replace

from occupy.api import DEFAULT, acquire, release
from occupy.backends import get_backend
from occupy.backends.base import OccupationRows
from occupy.conf import occupy_settings
from occupy.exceptions import InvalidBackendError, Occupied
from occupy.leases import Lease, default_owner
from occupy.models.keys import (
    lock_model,
    object_key,
    parse_pk_text,
    pk_text_expression,
    value_field,
)
from occupy.validation import check_owner, check_ttl

__all__ = ["Pool", "live_claims", "occupation_filter", "occupation_rows", "pk_field"]


def occupation_rows(alias: str, what: str) -> OccupationRows:
    """Return how to read backend ``alias``'s claims as ``Occupation`` rows, or raise
    ``InvalidBackendError`` saying that ``what`` needs them."""
    backend = get_backend(alias)
    rows = backend.occupation_rows()
    if rows is None:
        raise InvalidBackendError(
            f"{what} reads the claims as Occupation rows, but the occupy backend {alias!r} "
            f"({type(backend).__name__}) keeps them elsewhere; pass the alias of a "
            "DatabaseBackend."
        )
    return rows


def live_claims(model: type[models.Model], rows: OccupationRows) -> models.QuerySet[Any]:
    """Return the live granted claims on rows of ``model``, each annotated with
    ``occupy_object_id``: the object id as text equal to the row's
    :func:`~occupy.models.keys.pk_text_expression` (where the database has no uuid
    type, a UUID primary key is stored as 32 hex digits: the dashes go)."""
    object_id = rows.object_id_text()
    native_uuid = connections[rows.database].features.has_native_uuid_field
    if isinstance(pk_field(model), models.UUIDField) and not native_uuid:
        object_id = Replace(object_id, Value("-"), Value(""), output_field=TextField())
    claims: models.QuerySet[Any] = rows.live(lock_model(model)).alias(occupy_object_id=object_id)
    return claims


def pk_field(model: type[models.Model]) -> models.Field[Any, Any]:
    """Return the field whose values the primary key holds (through parent links)."""
    return value_field(model._meta.pk)


def _to_pk(model: type[models.Model], object_id: str) -> Any:
    try:
        return parse_pk_text(model, object_id)
    except ValueError:
        return None  # a key of this model's form that names no valid pk


def occupation_filter(queryset: models.QuerySet[Any], alias: str) -> Q | Exists:
    """Return a filter matching ``queryset``'s rows that are occupied on ``alias``.

    When the claims live in the queryset's own database it is an ``EXISTS`` subquery,
    evaluated with the queryset (a queryset kept for later still answers then);
    otherwise the held primary keys are read now.
    """
    model = queryset.model
    rows = occupation_rows(alias, "occupied() and free()")
    claims = live_claims(model, rows)
    if rows.database != queryset.db:
        pks = [_to_pk(model, oid) for oid in claims.values_list("object_id", flat=True)]
        return Q(pk__in=[pk for pk in pks if pk is not None])
    return Exists(claims.filter(occupy_object_id=pk_text_expression(model, outer=True)))


class Pool:
    """One ``claim()`` call: the owner's held row, or the next free one."""

    def __init__(
        self,
        queryset: models.QuerySet[Any],
        alias: str,
        rows: OccupationRows,
        *,
        owner: str | None,
        ttl: Any,
        order_by: Any,
    ) -> None:
        self.owner = default_owner() if owner is None else check_owner(owner)
        self.ttl = occupy_settings.TTL if ttl is DEFAULT else check_ttl(ttl)
        if order_by is not None:
            if isinstance(order_by, str):
                order_by = (order_by,)
            queryset = queryset.order_by(*order_by)
        elif not queryset.ordered:
            queryset = queryset.order_by("pk")
        self.queryset = queryset
        self.model = queryset.model
        self.alias = alias
        self.rows = rows

    def held(self) -> Any:
        """Return the row of the pool the owner holds (oldest grant first), its lease
        rebuilt from the claim, or ``None``."""
        claims = (
            live_claims(self.model, self.rows)
            .filter(owner=self.owner)
            .order_by("fence")
            .values("object_id", "key", "owner", "token", "fence", "expires_at", "depth")
        )
        for claim in claims:
            pk = _to_pk(self.model, claim["object_id"])
            item = None if pk is None else self.queryset.filter(pk=pk).first()
            if item is not None:
                item.lease = self.rows.lease(claim, self.ttl)
                return item
        return None

    def take_next(self) -> Any:
        """Lock the first free row for the owner and return it, or ``None``.

        Where the database can, the candidate is read with ``FOR UPDATE SKIP LOCKED``
        in a transaction kept open while its lock is taken, so concurrent claimers
        each get a different candidate instead of all trying the first. The lock
        itself (taken on the backend's own connection, committed at once) is what
        decides; a candidate someone else got first is skipped. The row returned is as
        it stands under the lock: read in the same statement that locks it, or, where
        rows cannot be locked, read again once the lease is granted (one that left
        the pool meanwhile, finished by another editor, is let go and skipped).
        """
        free = self.queryset.exclude(occupation_filter(self.queryset, self.alias))
        skipped: list[Any] = []
        while True:
            candidates = free.exclude(pk__in=skipped) if skipped else free
            db = candidates.select_for_update().db
            features = connections[db].features
            if features.has_select_for_update_skip_locked:
                of = ("self",) if features.has_select_for_update_of else ()
                with transaction.atomic(using=db):
                    item = candidates.select_for_update(skip_locked=True, of=of).first()
                    lease = None if item is None else self._lock(item)
            else:
                item = candidates.first()
                lease = None if item is None else self._lock(item)
                if item is not None and lease is not None:
                    item, lease = self._reread(item, lease)
            if item is None:
                return None
            if lease is not None:
                item.lease = lease
                return item
            skipped.append(item.pk)

    def _reread(self, item: models.Model, lease: Lease) -> tuple[models.Model, Lease | None]:
        """Return the row as it stands under the lease, or let the lease go if the row
        left the pool before it was locked."""
        fresh = self.queryset.filter(pk=item.pk).first()
        if fresh is None:
            release(lease)
            return item, None
        return fresh, lease

    def _lock(self, item: models.Model) -> Lease | None:
        try:
            return acquire(
                object_key(self.model, item.pk),
                owner=self.owner,
                ttl=self.ttl,
                timeout=0,
                backend=self.alias,
            )
        except Occupied:
            return None
