"""``OccupyHistoryAdminMixin``: an object's *History* page reads occupy's entries (a
takeover, a force release) in the reader's language, as it reads Django's own (see
:mod:`occupy.history`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from occupy.history import get_change_message

if TYPE_CHECKING:
    from django.contrib.admin.models import LogEntry

    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = object

__all__ = ["OccupyHistoryAdminMixin"]


class OccupyHistoryAdminMixin(_ModelAdmin):
    """Show occupy's log entries translated on the History page. occupy's admin mixins
    include it; add it to the admin of a model whose takeovers only the API makes."""

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Return Django's History page, its entries read by
        :func:`occupy.history.get_change_message`."""
        response = super().history_view(request, object_id, extra_context)
        if isinstance(response, TemplateResponse) and response.context_data:
            page = response.context_data.get("action_list")
            if page is not None:
                page.object_list = [_ReadEntry(entry) for entry in page.object_list]
        return response


class _ReadEntry:
    """A log entry as the History page shows it: its change message read by occupy."""

    def __init__(self, entry: LogEntry) -> None:
        self._entry = entry

    def __getattr__(self, name: str) -> Any:
        return getattr(self._entry, name)

    def get_change_message(self) -> str:
        """Return the change message in the active language."""
        return get_change_message(self._entry)
