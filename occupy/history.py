"""Entries in Django's admin log (an object's *History*) for what occupy does on
someone's behalf to another holder's lease: a takeover, a force release.

An entry is written as Django writes its own: ``change_message`` holds JSON that is
translated when it is read, never a sentence fixed in one language. It is one
sub-message of Django's kinds (``changed``, ``deleted``), which Django's own History
page reads in its own words, and, beside it under ``occupy``, occupy's sentence (a
msgid, marked for translation) with its values, which :func:`get_change_message`
reads in the active language; occupy's admins show their History pages with it
(:class:`occupy.admin.OccupyHistoryAdminMixin`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext, gettext_noop

if TYPE_CHECKING:
    from django.contrib.admin.models import LogEntry
    from django.db.models import Model

__all__ = ["force_released_message", "get_change_message", "log_entry", "took_over_message"]

#: A ``change_message`` as Django's ``log_actions()`` takes it: a list it stores as JSON.
ChangeMessage = list[dict[str, Any]]

#: occupy's sentences, stored untranslated and translated when read.
TOOK_OVER = gettext_noop("Took over the edit lease from %(holder)s (fence %(fence)s).")
FORCE_RELEASED = gettext_noop(
    "Force-released %(key)s (fence %(fence)s, %(state)s) held by %(owner)s."
)
#: What Django's own sentences call the things changed (translated when read, as the
#: field and model names of Django's entries are).
EDIT_LEASE = gettext_noop("edit lease")
OCCUPATION = gettext_noop("occupation")


def took_over_message(holder: str, fence: int) -> ChangeMessage:
    """Return the change message of a takeover of the edit lease that ``holder`` (as
    shown to people) held at ``fence``."""
    return [
        {
            "changed": {"fields": [EDIT_LEASE]},
            "occupy": {"message": TOOK_OVER, "values": {"holder": holder, "fence": fence}},
        }
    ]


def force_released_message(key: str, fence: int | None, state: str, owner: str) -> ChangeMessage:
    """Return the change message of a claim on ``key`` released by force from
    ``owner``."""
    values = {"key": repr(key), "fence": fence, "state": state, "owner": repr(owner)}
    return [
        {
            "deleted": {"name": OCCUPATION, "object": key},
            "occupy": {"message": FORCE_RELEASED, "values": values},
        }
    ]


def get_change_message(entry: LogEntry) -> str:
    """Return ``entry``'s change message in the active language: occupy's sentences
    translated, with their values; any other entry as Django reads it."""
    try:
        parts = json.loads(entry.change_message)
    except ValueError:  # a sentence as it was written
        return entry.get_change_message()
    if not isinstance(parts, list) or not parts:
        return entry.get_change_message()
    ours: list[dict[str, Any]] = [
        part["occupy"] for part in parts if isinstance(part, dict) and "occupy" in part
    ]
    if len(ours) != len(parts):  # Django's own, or another's
        return entry.get_change_message()
    return " ".join(gettext(part["message"]) % part["values"] for part in ours)


def log_entry(user_pk: Any, obj: Model, action_flag: int, message: ChangeMessage) -> None:
    """Write one admin log entry for ``obj`` by user ``user_pk`` (needs
    ``django.contrib.admin``; the caller checks it is installed)."""
    from django.contrib.admin.models import LogEntry

    LogEntry.objects.log_actions(
        user_pk, [obj], action_flag, change_message=message, single_object=True
    )
