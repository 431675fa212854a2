"""The database backend's claims as ``Occupation`` rows, for the model side, and the
store's clock as ORM expressions (:func:`store_now`, :func:`farthest_expiry`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import models
from django.db.models.expressions import RawSQL

from occupy.backends.base import OccupationRows
from occupy.leases import Lease

if TYPE_CHECKING:
    from occupy.backends.base import BaseBackend
    from occupy.backends.db.dialects import Dialect

__all__ = ["DatabaseOccupationRows", "farthest_expiry", "store_now"]


def store_now(dialect: Dialect) -> RawSQL:
    """Return the store's now as an ORM expression: the clock claims expire by.

    Not Django's ``Now()``: on MySQL that is ``CURRENT_TIMESTAMP`` in the session's
    time zone, while claims are written and expire by ``UTC_TIMESTAMP()``.
    """
    return RawSQL(dialect.now, [], output_field=models.DateTimeField())


def farthest_expiry(dialect: Dialect) -> RawSQL:
    """Return the latest expiry a claim of occupy's may have, as an ORM expression
    (see :attr:`~occupy.backends.db.dialects.base.Dialect.farthest`)."""
    return RawSQL(dialect.farthest, [], output_field=models.DateTimeField())


class DatabaseOccupationRows(OccupationRows):
    """Live ``using`` claims of ``backend`` (a ``DatabaseBackend``) in ``database``,
    read with the ORM.

    The backend fills an ``Occupation``'s content type and object id (as text) for keys
    of the form ``"<app_label>.<model_name>:<pk>"``; a live claim is one in state
    ``using`` whose ``expires_at`` is still ahead of the database's clock.
    """

    def __init__(self, backend: BaseBackend, database: str, dialect: Dialect) -> None:
        self.backend = backend
        self.database = database
        self.dialect = dialect

    def live(self, model: type[models.Model]) -> models.QuerySet[Any]:
        """Return the live granted claims on rows of ``model`` (the model the keys
        name), as ``Occupation`` rows."""
        from django.contrib.contenttypes.models import ContentType

        occupation = apps.get_model("occupy", "Occupation")
        content_type = ContentType.objects.db_manager(self.database).get_for_model(model)
        return occupation._default_manager.using(self.database).filter(
            content_type_id=content_type.pk,
            state="using",
            expires_at__gt=store_now(self.dialect),
            expires_at__lte=farthest_expiry(self.dialect),
        )

    def object_id_text(self) -> Any:
        """Return ``object_id`` as text that equals a ``Cast(pk, TextField())``."""
        return self.dialect.object_id_text("object_id")

    def lease(self, claim: Mapping[str, Any], ttl: float) -> Lease:
        """Return the lease a live claim stands for (its token, fence, expiry, depth)."""
        return self.backend.make_lease(
            claim["key"],
            owner=claim["owner"],
            token=claim["token"],
            fence=claim["fence"],
            expires_at=self.dialect.to_datetime(claim["expires_at"]),
            ttl=ttl,
            depth=claim["depth"],
        )
