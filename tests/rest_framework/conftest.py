"""Fixtures of the DRF tests: users with and without permissions, an API client, and a
real HTTP server for the tests where several client processes race."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from tests.live_server import serve
from tests.models.conftest import wipe_tables

PASSWORD = "occupy-pass"
MODELS = ["book", "document", "label", "uuidbook", "shelf"]


@dataclass
class Users:
    """The users of one test: an editor (change permissions), a second editor, a viewer
    (view only) and a supervisor (may take leases over)."""

    editor: User
    other: User
    viewer: User
    supervisor: User


def _user(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, password=PASSWORD, first_name=name.title())
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)  # a fresh instance: no stale permission cache


def _write_perms() -> list[str]:
    return [f"{action}_{model}" for model in MODELS for action in ("add", "change", "delete",
                                                                   "view")]


@pytest.fixture
def users(live_db: None) -> Iterator[Users]:
    """Fresh users, deleted afterwards, with empty test tables."""
    wipe_tables()
    User.objects.all().delete()
    writes = _write_perms()
    yield Users(
        editor=_user("editor", *writes),
        other=_user("other", *writes),
        viewer=_user("viewer", *[f"view_{m}" for m in MODELS]),
        supervisor=_user("supervisor", *writes, "force_release_occupation"),
    )
    wipe_tables()
    User.objects.all().delete()


@pytest.fixture
def client_for(users: Users):
    """Return an API client authenticated as a given user."""

    def make(user: User, *, csrf: bool = False) -> APIClient:
        client = APIClient(enforce_csrf_checks=csrf)
        if csrf:
            client.login(username=user.username, password=PASSWORD)
        else:
            client.force_authenticate(user)
        return client

    return make


@pytest.fixture
def server_url(users: Users) -> Iterator[str]:
    """A real threaded HTTP server running the test project, on a free port."""
    with serve() as url:
        yield url
