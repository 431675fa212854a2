"""View mixins that give a DRF API occupy's HTTP contract (:mod:`occupy.http`).

    class BookViewSet(OccupyViewMixin, viewsets.ModelViewSet):
        queryset = Book.objects.all()          # a VersionedMixin + OccupiableMixin model
        serializer_class = BookSerializer      # with OccupyModelSerializerMixin

The rule every mixin follows: the decisive comparison happens in the same statement or
critical section as the write. ``ConditionalMixin`` puts the client's version into
``VersionedMixin``'s guarded ``UPDATE`` (or guarded delete); ``OccupiedWritesMixin``
holds the object's key for the length of the write, or writes under the client's edit
lease with its fence; ``EditLeaseMixin`` takes a lease over only from the holder its
permission was decided on. A pre-check only answers early.

One module per role: :mod:`~occupy.rest_framework.errors` (the status table on a view),
:mod:`~occupy.rest_framework.conditional`, :mod:`~occupy.rest_framework.writes`,
:mod:`~occupy.rest_framework.leases`; this module gathers them.
"""

from __future__ import annotations

from typing import Any

from occupy.rest_framework.conditional import ConditionalMixin
from occupy.rest_framework.errors import OccupyErrorsMixin
from occupy.rest_framework.leases import EditLeaseMixin
from occupy.rest_framework.writes import OccupiedWritesMixin

__all__ = [
    "ConditionalMixin",
    "EditLeaseMixin",
    "OccupiedWritesMixin",
    "OccupyErrorsMixin",
    "OccupyViewMixin",
]


class OccupyViewMixin(EditLeaseMixin, ConditionalMixin):
    """Conditional requests, writes outside other editors' leases, and lease endpoints.

    A write whose precondition is already stale is answered 412 before it queues for the
    object's key: versions only rise, so it could never pass, and the writes queued
    behind it need not wait for it. The comparison that decides stays the guarded
    ``UPDATE`` (or delete) under the key.
    """

    def perform_update(self, serializer: Any) -> None:
        """Refuse a stale precondition at once; else save under the key, guarded."""
        self.check_client_version(serializer.instance)
        super().perform_update(serializer)

    def perform_destroy(self, instance: Any) -> None:
        """Refuse a stale precondition at once; else delete under the key, guarded."""
        self.check_client_version(instance)
        super().perform_destroy(instance)
