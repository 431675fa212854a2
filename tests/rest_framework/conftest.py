"""Fixtures of the DRF tests: users with and without permissions, an API client, and a
real HTTP server for the tests where several client processes race."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from tests.support.cleanup import wipe_tables
from tests.support.live_server import serve
from tests.support.users import PASSWORD, ApiUsers, api_users


@pytest.fixture
def users(live_db: None) -> Iterator[ApiUsers]:
    """Fresh users, deleted afterwards, with empty test tables."""
    wipe_tables()
    User.objects.all().delete()
    yield api_users()
    wipe_tables()
    User.objects.all().delete()


@pytest.fixture
def client_for(users: ApiUsers):
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
def server_url(users: ApiUsers) -> Iterator[str]:
    """A real threaded HTTP server running the test project, on a free port."""
    with serve() as url:
        yield url
