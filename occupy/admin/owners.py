"""Who an owner string names, as the admin shows it (never a token)."""

from __future__ import annotations

import re

__all__ = ["admin_owner", "owner_display", "owner_user_pk"]

#: ``admin:user:<pk>:tab:<id>`` (an admin tab), ``user:<pk>…`` (the DRF integration).
_USER_OWNER = re.compile(r"^(?:admin:)?user:(?P<pk>[^:]+)(?::tab:(?P<tab>[^:]+))?")


def admin_owner(user_pk: object, tab: str) -> str:
    """Return the owner of an edit lease taken by one admin browser tab."""
    return f"admin:user:{user_pk}:tab:{tab}"


def owner_user_pk(owner: str) -> str | None:
    """Return the user primary key an owner names, or ``None``."""
    match = _USER_OWNER.match(owner)
    return None if match is None else match["pk"]


def owner_display(owner: str) -> str:
    """Return the user an owner names (full name, else username), or ``"someone
    else"`` for owners that name no user (a host and process are nobody's business)."""
    pk = owner_user_pk(owner)
    name = None
    if pk is not None:
        from django.contrib.auth import get_user_model

        user_model = get_user_model()
        try:
            user = user_model._default_manager.get(pk=pk)
        except (user_model.DoesNotExist, ValueError, TypeError):
            name = None
        else:
            name = user.get_full_name() or user.get_username()
    return name or "someone else"
