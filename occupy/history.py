"""Entries in Django's admin log (an object's *History*) for what occupy does on
someone's behalf to another holder's lease: a takeover, a force release."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.db.models import Model

__all__ = ["log_entry"]


def log_entry(user_pk: Any, obj: Model, action_flag: int, message: str) -> None:
    """Write one admin log entry for ``obj`` by user ``user_pk`` (needs
    ``django.contrib.admin``; the caller checks it is installed)."""
    from django.contrib.admin.models import LogEntry

    LogEntry.objects.log_actions(
        user_pk, [obj], action_flag, change_message=message, single_object=True
    )
