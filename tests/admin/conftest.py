"""Fixtures of the admin tests: staff users, a real threaded HTTP server serving the test
project (static files included), and headless Chromium browsers logged in as a user.

Without Chromium, its driver or selenium the browser tests skip, with the reason; with
``OCCUPY_REQUIRE_SERVERS=1`` (CI) they fail instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.test import Client

from tests.support.browser import Browser, browser_missing, open_browser
from tests.support.cleanup import wipe_tables
from tests.support.live_server import serve
from tests.support.redis_server import ALIAS, RedisServer, private_redis, redis_server_missing
from tests.support.users import StaffUsers, staff_users
from tests.testapp.models import Document


@pytest.fixture
def users(live_db: None) -> Iterator[StaffUsers]:
    """Fresh staff users, deleted afterwards, with empty test tables."""
    wipe_tables()
    User.objects.all().delete()
    yield staff_users()
    wipe_tables()
    User.objects.all().delete()


class LeasePages:
    """The admin's change pages under an edit lease, as a client reads them."""

    @staticmethod
    def url(obj: Any, suffix: str = "change/") -> str:
        """Return the admin URL of ``obj``'s change page, or of its ``suffix``."""
        return f"/admin/testapp/{obj._meta.model_name}/{quote(obj.pk)}/{suffix}"

    @staticmethod
    def open(client: Client, url: str) -> tuple[str, dict[str, str]]:
        """Return the page and its lease box's state, tab and first lease token."""
        response = client.get(url)
        assert response.status_code == 200, response.status_code
        html = response.content.decode()
        state = re.search(r'id="occupy-lease"[^>]*data-state="(\w+)"', html)
        tab = re.search(r'name="_occupy_tab" value="([0-9a-f]+)"', html)
        tokens = re.findall(r'name="_occupy_lease" value="([0-9a-f]+)"', html)
        return html, {
            "state": state[1] if state else "",
            "tab": tab[1] if tab else "",
            "token": tokens[0] if tokens else "",
        }


@pytest.fixture
def pages() -> LeasePages:
    """The edit-lease pages' URLs and what a client reads on them."""
    return LeasePages()


@pytest.fixture
def doc(users: StaffUsers) -> Document:
    """A fenced, versioned document nobody edits yet."""
    return Document.objects.create(body="draft")


@pytest.fixture
def server_url(users: StaffUsers) -> Iterator[str]:
    """A real threaded HTTP server running the test project and its static files."""
    with serve(static=True) as url:
        yield url


@pytest.fixture
def browser(server_url: str) -> Iterator[Callable[[User], Browser]]:
    """Return a factory of headless Chromium browsers logged in as a given user."""
    why = browser_missing()
    if why is not None:
        if settings.REQUIRE_SERVERS:
            pytest.fail(f"OCCUPY_REQUIRE_SERVERS=1 but {why}.")
        pytest.skip(why)
    browsers: list[Browser] = []

    def make(user: User) -> Browser:
        browsers.append(open_browser(server_url, user))
        return browsers[-1]

    yield make
    for browser in browsers:
        browser.quit()


@pytest.fixture
def store(users: StaffUsers, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """The edit leases of every admin on a private Redis the test can kill part-way."""
    from django.contrib import admin

    from occupy.admin import EditLeaseAdminMixin

    why = redis_server_missing()
    if why is not None:
        if settings.REQUIRE_SERVERS:
            pytest.fail(f"OCCUPY_REQUIRE_SERVERS=1 but {why}.")
        pytest.skip(why)
    with private_redis() as server:
        for model_admin in admin.site._registry.values():
            if isinstance(model_admin, EditLeaseAdminMixin):
                monkeypatch.setattr(model_admin, "occupy_backend", ALIAS)
        yield server
