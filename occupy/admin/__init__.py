"""occupy in the Django admin: ``OccupationAdmin`` (registered), and the mixins that
give a ``ModelAdmin`` edit leases, version checks and an "is being edited" column::

    @admin.register(Book)
    class BookAdmin(EditLeaseAdminMixin, VersionedAdminMixin, OccupyStatusAdminMixin,
                    admin.ModelAdmin):
        list_display = ["name", "status", "occupy_status"]
"""

from occupy.admin.history import OccupyHistoryAdminMixin
from occupy.admin.leases import EditLeaseAdminMixin
from occupy.admin.occupation import OccupationAdmin
from occupy.admin.status import OccupiedListFilter, OccupyStatusAdminMixin
from occupy.admin.versioned import VersionedAdminMixin, VersionedInlineMixin, versioned_form

__all__ = [
    "EditLeaseAdminMixin",
    "OccupationAdmin",
    "OccupiedListFilter",
    "OccupyHistoryAdminMixin",
    "OccupyStatusAdminMixin",
    "VersionedAdminMixin",
    "VersionedInlineMixin",
    "versioned_form",
]
