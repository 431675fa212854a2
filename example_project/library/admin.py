"""Admin for the library: books and tasks, each edited by one person at a time.

``BookAdmin`` uses all three of occupy's admin mixins: an edit lease per browser tab
(the others get the read-only form and a banner), the hidden version (a stale form
meets the conflict page instead of reverting someone's change), and the
"being edited" column and filter; its list edits and actions are refused while someone
edits a row. ``TaskAdmin`` uses the same three.
"""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from example_project.library.models import Book, Task
from occupy.admin import EditLeaseAdminMixin, OccupyStatusAdminMixin, VersionedAdminMixin


@admin.register(Book)
class BookAdmin(EditLeaseAdminMixin, VersionedAdminMixin, OccupyStatusAdminMixin, admin.ModelAdmin):
    list_display = ["name", "status", "borrow_count", "stock", "occupy_status"]
    # A list save holds the keys of the rows it changes: refused while a tab edits one.
    list_editable = ["status"]
    search_fields = ["name"]
    actions = ["mark_free"]

    @admin.action(description="Mark the selected books free", permissions=["change"])
    def mark_free(self, request: HttpRequest, queryset: QuerySet[Book]) -> None:
        """Write through ``update_versioned()``: each row's version moves on, so a change
        form opened before this action is refused instead of writing the old status back."""
        count = queryset.update_versioned(status=Book.Status.FREE)
        self.message_user(request, f"{count} book(s) marked free.")


@admin.register(Task)
class TaskAdmin(EditLeaseAdminMixin, VersionedAdminMixin, OccupyStatusAdminMixin, admin.ModelAdmin):
    list_display = ["title", "category", "priority", "done", "created_at", "occupy_status"]
    list_filter = ["done", "category"]
