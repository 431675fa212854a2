"""What ``occupied()``, ``free()`` and ``claim()`` read: the database backend's live
``Occupation`` rows of a model, and the task pool built on them (seed 004).

The database backend fills an ``Occupation``'s content type and object id (as text)
for keys of the form ``"<app_label>.<model_name>:<pk>"``; a live claim is one in state
``using`` whose ``expires_at`` is still ahead of the database's clock.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import connections, models, transaction
from django.db.models import Exists, OuterRef, Q, TextField, Value
from django.db.models.functions import Cast, Replace

from occupy.api import DEFAULT, acquire, release
from occupy.backends import get_backend
from occupy.backends.db import DatabaseBackend
from occupy.conf import occupy_settings
from occupy.exceptions import InvalidBackendError, Occupied
from occupy.leases import Lease, default_owner
from occupy.models.keys import lock_model, object_key
from occupy.models.occupation import Occupation
from occupy.validation import check_owner, check_ttl

__all__ = ["Pool", "database_backend", "live_claims", "occupation_filter"]


def database_backend(alias: str, what: str) -> DatabaseBackend:
    """Return the backend ``alias`` if it keeps ``Occupation`` rows, else raise."""
    backend = get_backend(alias)
    if not isinstance(backend, DatabaseBackend):
        raise InvalidBackendError(
            f"{what} reads the database backend's Occupation rows, but the occupy backend "
            f"{alias!r} is a {type(backend).__name__}; pass using= a DatabaseBackend alias."
        )
    return backend


def live_claims(model: type[models.Model], backend: DatabaseBackend) -> models.QuerySet:
    """Return the live granted claims on rows of ``model`` in ``backend``'s database."""
    from django.contrib.contenttypes.models import ContentType

    content_type = ContentType.objects.db_manager(backend.database).get_for_model(
        lock_model(model))
    return Occupation.objects.using(backend.database).filter(
        content_type_id=content_type.pk, state=Occupation.State.USING,
        expires_at__gt=backend.now(),
    )


def _pk_field(model: type[models.Model]) -> models.Field:
    """Return the field whose values the primary key holds (through parent links)."""
    field = model._meta.pk
    while field.is_relation:
        field = field.target_field
    return field


def _to_pk(model: type[models.Model], object_id: str) -> Any:
    try:
        return _pk_field(model).to_python(object_id)
    except ValidationError:
        return None  # a key of this model's form that names no valid pk


def occupation_filter(queryset: models.QuerySet, alias: str) -> Q | Exists:
    """Return a filter matching ``queryset``'s rows that are occupied on ``alias``.

    When the claims live in the queryset's own database it is an ``EXISTS`` subquery,
    evaluated with the queryset (a queryset kept for later still answers then);
    otherwise the held primary keys are read now.
    """
    model = queryset.model
    backend = database_backend(alias, "occupied() and free()")
    claims = live_claims(model, backend)
    if backend.database != queryset.db:
        pks = [_to_pk(model, oid) for oid in claims.values_list("object_id", flat=True)]
        return Q(pk__in=[pk for pk in pks if pk is not None])
    vendor = connections[queryset.db].vendor
    # object_id holds str(pk). Compare text with text: a UUID is stored as 32 hex
    # digits where the database has no uuid type, so the dashes go; MySQL compares both
    # sides cast, so that columns of different collations never meet.
    object_id: Any = Cast("object_id", TextField()) if vendor == "mysql" else models.F(
        "object_id")
    native_uuid = connections[queryset.db].features.has_native_uuid_field
    if isinstance(_pk_field(model), models.UUIDField) and not native_uuid:
        object_id = Replace(object_id, Value("-"), Value(""), output_field=TextField())
    pk_text = Cast(OuterRef("pk"), TextField())
    return Exists(claims.alias(occupy_object_id=object_id).filter(occupy_object_id=pk_text))


class Pool:
    """One ``claim()`` call: the owner's held row, or the next free one."""

    def __init__(self, queryset: models.QuerySet, alias: str, backend: DatabaseBackend, *,
                 owner: str | None, ttl: Any, order_by: Any) -> None:
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
        self.backend = backend

    def held(self) -> Any:
        """Return the row of the pool the owner holds (oldest grant first), its lease
        rebuilt from the claim, or ``None``."""
        rows = (live_claims(self.model, self.backend).filter(owner=self.owner)
                .order_by("fence")
                .values_list("object_id", "key", "token", "fence", "expires_at", "depth"))
        for object_id, key, token, fence, expires_at, depth in rows:
            pk = _to_pk(self.model, object_id)
            item = None if pk is None else self.queryset.filter(pk=pk).first()
            if item is not None:
                item.lease = Lease(
                    key=key, owner=self.owner, token=token, fence=int(fence),
                    expires_at=self.backend.dialect.to_datetime(expires_at), ttl=self.ttl,
                    using=self.alias, depth=depth, backend=self.backend,
                )
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
                if lease is not None:
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
            return acquire(object_key(self.model, item.pk), owner=self.owner, ttl=self.ttl,
                           timeout=0, using=self.alias)
        except Occupied:
            return None

