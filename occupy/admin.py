"""Admin for :class:`~occupy.models.Occupation`: see who holds what, force-release it."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from occupy.models import Occupation

logger = logging.getLogger("occupy.admin")


@admin.register(Occupation)
class OccupationAdmin(admin.ModelAdmin):
    """Read-only list of claims; releasing one by force needs
    ``occupy.force_release_occupation`` and is logged."""

    list_display = ["key", "owner", "state", "fence", "depth", "created_at", "expires_at"]
    list_filter = ["state"]
    search_fields = ["key", "owner"]
    ordering = ["key", "id"]
    exclude = ["token", "digest", "slot"]
    readonly_fields = ["key", "content_type", "object_id", "owner", "state", "fence", "depth",
                       "created_at", "expires_at"]
    actions = ["force_release"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_force_release_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may release other owners' claims."""
        return request.user.has_perm("occupy.force_release_occupation")

    @admin.action(description=_("Force-release the selected claims"),
                  permissions=["force_release"])
    def force_release(self, request: HttpRequest, queryset: QuerySet[Occupation]) -> None:
        """Delete the selected claims; their holders' next release or extend fails."""
        claims = list(queryset.values_list("key", "owner"))
        if hasattr(self, "log_deletions"):  # Django 5.1+
            self.log_deletions(request, queryset)
        else:  # pragma: no cover - Django 4.2
            for obj in queryset:
                self.log_deletion(request, obj, str(obj))
        for key, owner in claims:
            logger.warning("%s force-released %r held by %r", request.user, key, owner)
        queryset.delete()
        self.message_user(request, f"Released {len(claims)} claim(s).", messages.SUCCESS)
