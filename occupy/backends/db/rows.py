"""The database backend's claims as ``Occupation`` rows, for the model side."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import models

from occupy.backends.base import OccupationRows
from occupy.leases import Lease

if TYPE_CHECKING:
    from occupy.backends.db.backend import DatabaseBackend

__all__ = ["DatabaseOccupationRows"]


class DatabaseOccupationRows(OccupationRows):
    """Live ``using`` claims of a :class:`DatabaseBackend`, read with the ORM.

    The backend fills an ``Occupation``'s content type and object id (as text) for keys
    of the form ``"<app_label>.<model_name>:<pk>"``; a live claim is one in state
    ``using`` whose ``expires_at`` is still ahead of the database's clock.
    """

    def __init__(self, backend: DatabaseBackend) -> None:
        self.backend = backend
        self.database = backend.database

    def live(self, model: type[models.Model]) -> models.QuerySet[Any]:
        """Return the live granted claims on rows of ``model`` (the model the keys
        name), as ``Occupation`` rows."""
        from django.contrib.contenttypes.models import ContentType

        occupation = apps.get_model("occupy", "Occupation")
        content_type = ContentType.objects.db_manager(self.database).get_for_model(model)
        return occupation._default_manager.using(self.database).filter(
            content_type_id=content_type.pk,
            state="using",
            expires_at__gt=self.backend.now(),
            expires_at__lte=self.backend.farthest(),
        )

    def object_id_text(self) -> Any:
        """Return ``object_id`` as text that equals a ``Cast(pk, TextField())``."""
        return self.backend.dialect.object_id_text("object_id")

    def lease(self, claim: Mapping[str, Any], ttl: float) -> Lease:
        """Return the lease a live claim stands for (its token, fence, expiry, depth)."""
        return self.backend.make_lease(
            claim["key"],
            owner=claim["owner"],
            token=claim["token"],
            fence=claim["fence"],
            expires_at=self.backend.dialect.to_datetime(claim["expires_at"]),
            ttl=ttl,
            depth=claim["depth"],
        )
