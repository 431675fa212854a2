"""Fixtures of the admin tests: staff users, a real threaded HTTP server serving the test
project (static files included), and headless Chromium browsers logged in as a user.

The browser tests need Debian's ``chromium`` and ``chromium-driver`` (``apt-get install
chromium chromium-driver``) and the ``selenium`` package. Without them they skip, with
the reason; with ``OCCUPY_REQUIRE_SERVERS=1`` (CI) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.test import Client

from tests.live_server import serve
from tests.models.conftest import wipe_tables

PASSWORD = "occupy-pass"
MODELS = ["book", "chapter", "document", "label", "uuidbook", "shelf"]
CHROMIUM = os.environ.get("OCCUPY_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("OCCUPY_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
#: Where each state of the pages is photographed (ignored by git).
SCREENSHOTS = Path(__file__).resolve().parent.parent / ".screenshots"


@dataclass
class Users:
    """Staff users: two editors (change permissions) and a supervisor (may take over)."""

    editor: User
    other: User
    supervisor: User


def _user(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, password=PASSWORD, first_name=name.title(),
                                    is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def users(live_db: None) -> Iterator[Users]:
    """Fresh staff users, deleted afterwards, with empty test tables."""
    wipe_tables()
    User.objects.all().delete()
    writes = [f"{action}_{model}" for model in MODELS
              for action in ("add", "change", "delete", "view")]
    yield Users(editor=_user("editor", *writes), other=_user("other", *writes),
                supervisor=_user("supervisor", *writes, "force_release_occupation",
                                "view_occupation"))
    wipe_tables()
    User.objects.all().delete()


def login(user: User) -> Client:
    """Return a test client logged in as ``user``."""
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def server_url(users: Users) -> Iterator[str]:
    """A real threaded HTTP server running the test project and its static files."""
    with serve(static=True) as url:
        yield url


def browser_missing() -> str | None:
    """Return why no browser test can run here, or ``None``."""
    if importlib.util.find_spec("selenium") is None:
        return "the browser tests need the Python package 'selenium' (pip install selenium)"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not (os.path.exists(path) or shutil.which(path)):
            return f"the browser tests need {path} (apt-get install {package})"
    return None


class Browser:
    """One headless Chromium (its own cookies: one user), with small helpers."""

    def __init__(self, driver: Any, base: str, name: str) -> None:
        self.driver = driver
        self.base = base
        self.name = name

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def finds(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def wait(self, condition: Callable[[], Any], timeout: float = 10, what: str = "") -> Any:
        """Poll ``condition`` until it is true (return it) or fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = condition()
            except Exception:  # the page may be between two loads
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: waited {timeout}s for {what or condition}")
            time.sleep(0.1)

    def state(self) -> str | None:
        """Return the lease state the page shows (editing, readonly, lost)."""
        boxes = self.finds("#occupy-lease")
        return boxes[0].get_attribute("data-state") if boxes else None

    def text(self, css: str) -> str:
        return self.find(css).text

    def screenshot(self, name: str) -> None:
        SCREENSHOTS.mkdir(exist_ok=True)
        self.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


@pytest.fixture
def browser(server_url: str) -> Iterator[Callable[[User], Browser]]:
    """Return a factory of headless Chromium browsers logged in as a given user."""
    why = browser_missing()
    if why is not None:
        if settings.REQUIRE_SERVERS:
            pytest.fail(f"OCCUPY_REQUIRE_SERVERS=1 but {why}.")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    drivers: list[Any] = []

    def make(user: User) -> Browser:
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which(CHROMIUM) or CHROMIUM
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--window-size=1280,900", "--disable-gpu", "--lang=en-US"):
            options.add_argument(argument)
        driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        drivers.append(driver)
        session = login(user).cookies[settings.SESSION_COOKIE_NAME].value
        driver.get(f"{server_url}/static/admin/css/base.css")  # same origin, cheap
        driver.add_cookie({"name": settings.SESSION_COOKIE_NAME, "value": session,
                           "path": "/"})
        return Browser(driver, server_url, user.username)

    yield make
    for driver in drivers:
        driver.quit()
