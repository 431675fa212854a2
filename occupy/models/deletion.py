"""Edit leases end with their row: when a row of a model using occupy's mixins is
deleted, however it is deleted (the API, the admin, ``QuerySet.delete()``, a cascade),
the edit lease on its key (an API client's or an admin tab's) is ended once the delete
commits, so that a new row with the same primary key is not "being edited".

Invariants: only a person's edit lease is ended (never a write lock in flight, a task's
claim or a lock held by code); it is ended by a conditional takeover of exactly the
holder read (``if_fence``), so a lease taken after the delete is never touched; the
delete itself never fails for it: a store that cannot be reached is logged
(``occupy.models``) and the lease then ends by its ttl. The receiver is connected per
model (:func:`connect_lease_endings`), so models without occupy's mixins keep Django's
fast deletes. A model opts out with ``occupy_end_leases_on_delete = False``.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.apps import apps
from django.db import models, transaction
from django.db.models.signals import post_delete

from occupy.api import holder, release, takeover
from occupy.exceptions import LeaseLost, OccupyError, TakeoverRefused
from occupy.models.guarded import GuardedSaveMixin
from occupy.models.keys import object_key
from occupy.models.occupiable import OccupiableMixin
from occupy.owners import parse_owner

__all__ = ["DELETED_OWNER", "connect_lease_endings", "end_edit_lease"]

logger = logging.getLogger("occupy.models")

#: The owner of the moment's takeover that ends a deleted row's edit lease.
DELETED_OWNER = "occupy:row-deleted"


def end_edit_lease(model: type[models.Model], pk: Any) -> None:
    """End the edit lease on the key of ``model``'s row ``pk``, if a person holds one,
    on the model's ``occupy_backend``; log (never raise) when the store fails."""
    alias = getattr(model, "occupy_backend", "default")
    try:
        key = object_key(model, pk)
        current = holder(key, backend=alias)
        if current is None or not parse_owner(current.owner).is_edit_lease:
            return
        ended = takeover(
            key,
            owner=DELETED_OWNER,
            ttl=1,
            reentrant=False,
            if_fence=current.fence,
            backend=alias,
        )
        release(ended)
    except (TakeoverRefused, LeaseLost):
        return  # it changed hands after the delete: a lease of the new row, if any
    except (OccupyError, ValueError) as e:
        logger.warning(
            "The edit lease of deleted %s %r was not ended (%s: %s); it ends by its ttl.",
            model._meta.label,
            pk,
            type(e).__name__,
            e,
        )


def _row_deleted(
    sender: type[models.Model], instance: models.Model, using: str, **kwargs: Any
) -> None:
    """``post_delete``: end the row's edit lease once the delete commits (a delete
    that rolls back leaves the lease, and the row, as they were)."""
    transaction.on_commit(partial(end_edit_lease, sender, instance.pk), using=using)


def connect_lease_endings() -> None:
    """Connect :func:`_row_deleted` to every installed model that uses occupy's model
    mixins and has not opted out (``occupy_end_leases_on_delete = False``)."""
    for model in apps.get_models():
        if not issubclass(model, OccupiableMixin | GuardedSaveMixin):
            continue
        if not getattr(model, "occupy_end_leases_on_delete", True):
            continue
        post_delete.connect(
            _row_deleted, sender=model, dispatch_uid=f"occupy.end_edit_lease:{model._meta.label}"
        )
