"""Admin for :class:`~occupy.models.Occupation`: see who holds what, force-release it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.models import DELETION
from django.contrib.admin.utils import quote
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from occupy.history import force_released_message, log_entry
from occupy.models import Occupation
from occupy.owners import owner_display, parse_task_owner

__all__ = ["OccupationAdmin"]

logger = logging.getLogger("occupy.admin")

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Occupation]
else:
    _ModelAdmin = admin.ModelAdmin


def _short_time(value: Any) -> str:
    """Return ``value`` as local ``HH:MM:SS`` (the date too when it is not today)."""
    if value is None:
        return "—"
    local = timezone.localtime(value)
    if local.date() == timezone.localdate():
        return local.strftime("%H:%M:%S")
    return local.strftime("%Y-%m-%d %H:%M")


@admin.register(Occupation)
class OccupationAdmin(_ModelAdmin):
    """Read-only list of claims; releasing one by force needs
    ``occupy.force_release_occupation`` and is logged (admin log and ``occupy.admin``)."""

    # Narrow columns, so that all fit beside the filter at 1280 px: the state shows as
    # "(queued)" after a waiting owner, and the full owner string is the holder's title.
    list_display = ["locked_object", "holder", "fence", "since", "until"]
    list_display_links = None
    list_filter = ["state"]
    list_select_related = ["content_type"]
    search_fields = ["key", "owner"]
    ordering = ["key", "id"]
    exclude = ["token", "digest", "slot"]
    readonly_fields = [
        "key",
        "content_type",
        "object_id",
        "owner",
        "state",
        "fence",
        "depth",
        "created_at",
        "expires_at",
    ]
    actions = ["force_release"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Refuse: claims are made by taking locks."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Refuse: a claim is changed only by its holder's lease."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Refuse: claims go by :meth:`force_release` (logged), not by a plain delete."""
        return False

    def has_force_release_permission(self, request: HttpRequest) -> bool:
        """Return whether the user may release other owners' claims."""
        return request.user.has_perm("occupy.force_release_occupation")

    @admin.display(description=_("key"), ordering="key")
    def locked_object(self, obj: Occupation) -> str:
        """Return the key, linked to the admin page of the object it locks (if any)."""
        content_type = obj.content_type  # selected with the row (list_select_related)
        if content_type is None or obj.object_id is None:
            return obj.key
        model = content_type.model_class()
        if model is None or not self.admin_site.is_registered(model):
            return obj.key
        opts = model._meta
        try:
            url = reverse(
                f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_change",
                args=[quote(obj.object_id)],
            )
        except NoReverseMatch:
            return obj.key
        return format_html('<a href="{}">{}</a>', url, obj.key)

    @admin.display(description=_("holder"), ordering="owner")
    def holder(self, obj: Occupation) -> str:
        """Return the user the owner names (``admin:user:<pk>:tab:…``), a task's name and
        result id (``task:…``), else the owner (shortened); the whole owner string is its
        title. Queued claims say so."""
        name = owner_display(obj.owner)
        task = parse_task_owner(obj.owner)
        if task is not None:  # a background task: its name and result id, in full
            name = f"{task.name} ({task.task_id})"
        elif name == "someone else":
            name = obj.owner if len(obj.owner) <= 24 else f"{obj.owner[:23]}…"
        queued = " (queued)" if obj.state == Occupation.State.PENDING else ""
        return format_html('<span title="{}">{}</span>{}', obj.owner, name, queued)

    @admin.display(description=_("since"), ordering="created_at")
    def since(self, obj: Occupation) -> str:
        """Return when the claim was made."""
        return _short_time(obj.created_at)

    @admin.display(description=_("until"), ordering="expires_at")
    def until(self, obj: Occupation) -> str:
        """Return when the claim expires unless renewed."""
        return _short_time(obj.expires_at)

    @admin.action(description=_("Force-release the selected claims"), permissions=["force_release"])
    def force_release(self, request: HttpRequest, queryset: QuerySet[Occupation]) -> None:
        """Delete the selected claims and log, for each, what was released from whom;
        their holders' next release or extend fails."""
        claims = list(queryset)
        for claim in claims:
            log_entry(
                request.user.pk,
                claim,
                DELETION,
                force_released_message(claim.key, claim.fence, str(claim.state), claim.owner),
            )
            logger.warning("%s force-released %r held by %r", request.user, claim.key, claim.owner)
        queryset.filter(pk__in=[c.pk for c in claims]).delete()
        released = ngettext("Released %(count)d claim.", "Released %(count)d claims.", len(claims))
        self.message_user(request, released % {"count": len(claims)}, messages.SUCCESS)
