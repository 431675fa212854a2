"""The users of the admin and API tests, made fresh for each test, and logged-in clients."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import Permission, User
from django.test import Client

__all__ = ["PASSWORD", "ApiUsers", "StaffUsers", "api_users", "login", "staff_users"]

#: Every test user's password.
PASSWORD = "occupy-pass"
#: The test models the API's users may write.
API_MODELS = ["book", "document", "label", "uuidbook", "shelf", "longkeynote", "manual"]
#: The test models the admin's staff may write.
ADMIN_MODELS = [*API_MODELS, "chapter"]


@dataclass
class ApiUsers:
    """The users of one API test: an editor (change permissions), a second editor, a viewer
    (view only) and a supervisor (may take leases over)."""

    editor: User
    other: User
    viewer: User
    supervisor: User


@dataclass
class StaffUsers:
    """Staff users: two editors (change permissions) and a supervisor (may take over)."""

    editor: User
    other: User
    supervisor: User


def create_user(name: str, *codenames: str, staff: bool = False) -> User:
    """Create user ``name`` with the permissions ``codenames``; return a fresh instance
    (no stale permission cache)."""
    user = User.objects.create_user(
        name, password=PASSWORD, first_name=name.title(), is_staff=staff
    )
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)


def _writes(models: list[str]) -> list[str]:
    return [
        f"{action}_{model}" for model in models for action in ("add", "change", "delete", "view")
    ]


def api_users() -> ApiUsers:
    """Create the users of an API test."""
    writes = _writes(API_MODELS)
    return ApiUsers(
        editor=create_user("editor", *writes),
        other=create_user("other", *writes),
        viewer=create_user("viewer", *[f"view_{m}" for m in API_MODELS]),
        supervisor=create_user("supervisor", *writes, "force_release_occupation"),
    )


def staff_users() -> StaffUsers:
    """Create the staff users of an admin test."""
    writes = _writes(ADMIN_MODELS)
    return StaffUsers(
        editor=create_user("editor", *writes, staff=True),
        other=create_user("other", *writes, staff=True),
        supervisor=create_user(
            "supervisor", *writes, "force_release_occupation", "view_occupation", staff=True
        ),
    )


def login(user: User) -> Client:
    """Return a test client logged in as ``user``."""
    client = Client()
    client.force_login(user)
    return client
