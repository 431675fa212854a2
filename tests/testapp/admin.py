"""Admins of the test models: the edit-lease, versioned and status mixins on models with
an integer, a UUID and a string primary key, fenced or not."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from occupy.admin import (
    EditLeaseAdminMixin,
    OccupyStatusAdminMixin,
    VersionedAdminMixin,
    VersionedInlineMixin,
)
from tests.testapp.models import Book, Chapter, Document, Label, Manual, Scroll, Shelf, UUIDBook

#: Short leases, so that the browser tests see renewals and expiry within seconds.
TTL = 6


class FullAdmin(EditLeaseAdminMixin, VersionedAdminMixin, OccupyStatusAdminMixin, admin.ModelAdmin):
    edit_lease_ttl = TTL
    edit_lease_poll = 1
    # A page notices a lease lost to a force release or a takeover within a second (3 s
    # by default): the browser tests wait for it.
    edit_lease_check = 1


@admin.register(Book)
class BookAdmin(VersionedAdminMixin, OccupyStatusAdminMixin, admin.ModelAdmin):
    """Versions only: two tabs may both edit, the stale save meets the conflict page."""

    fields = ["name", "status", "note"]
    list_display = ["name", "status", "occupy_status"]
    list_editable = ["status"]
    actions = ["mark_free"]

    @admin.action(description="Mark as free", permissions=["change"])
    def mark_free(self, request: HttpRequest, queryset: QuerySet[Book]) -> None:
        """An admin action writes through update_versioned(): versions move on, so a
        form opened before it is stale."""
        queryset.update_versioned(status="free")


@admin.register(Manual)
class ManualAdmin(VersionedAdminMixin, admin.ModelAdmin):
    """Its version field is ``revision``; ``version`` is an ordinary field of the form."""

    fields = ["title", "version"]
    list_display = ["title", "version"]
    list_editable = ["version"]


@admin.register(Document)
class DocumentAdmin(FullAdmin):
    """Fenced and versioned, integer primary key."""


@admin.register(Label)
class LabelAdmin(FullAdmin):
    """Fenced and versioned, string primary key; its list is editable and has an action."""

    list_display = ["code", "text", "occupy_status"]
    list_editable = ["text"]
    actions = ["clear_text"]

    @admin.action(description="Clear the text", permissions=["change"])
    def clear_text(self, request: HttpRequest, queryset: QuerySet[Label]) -> None:
        """Write the selected rows through update_versioned()."""
        queryset.update_versioned(text="")


class ChapterInline(VersionedInlineMixin, admin.TabularInline):
    model = Chapter
    extra = 0


@admin.register(UUIDBook)
class UUIDBookAdmin(FullAdmin):
    """Versioned, UUID primary key, with versioned inline chapters."""

    inlines = [ChapterInline]


@admin.register(Shelf)
class ShelfAdmin(EditLeaseAdminMixin, OccupyStatusAdminMixin, admin.ModelAdmin):
    """Edit leases without versions, string primary key."""

    edit_lease_ttl = TTL
    edit_lease_poll = 1


@admin.register(Scroll)
class ScrollAdmin(EditLeaseAdminMixin, OccupyStatusAdminMixin, admin.ModelAdmin):
    """Edit leases on rows whose lock keys are shortened with a digest."""

    edit_lease_ttl = TTL
    edit_lease_poll = 1


#: Django's admin alone, as the control of the tests: seed 000's revert happens there.
plain_site = admin.AdminSite(name="plain")
plain_site.register(Book)
