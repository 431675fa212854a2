"""Fixtures of the admin tests: staff users, a real threaded HTTP server serving the test
project (static files included), and headless Chromium browsers logged in as a user.

Without Chromium, its driver or selenium the browser tests skip, with the reason; with
``OCCUPY_REQUIRE_SERVERS=1`` (CI) they fail instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from tests.support.browser import Browser, browser_missing, open_browser
from tests.support.cleanup import wipe_tables
from tests.support.live_server import serve
from tests.support.redis_server import ALIAS, RedisServer, private_redis, redis_server_missing
from tests.support.users import StaffUsers, staff_users


@pytest.fixture
def users(live_db: None) -> Iterator[StaffUsers]:
    """Fresh staff users, deleted afterwards, with empty test tables."""
    wipe_tables()
    User.objects.all().delete()
    yield staff_users()
    wipe_tables()
    User.objects.all().delete()


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
