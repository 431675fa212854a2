"""Headless Chromium browsers for the admin tests, logged in as a test user.

The browser tests need Debian's ``chromium`` and ``chromium-driver`` (``apt-get install
chromium chromium-driver``) and the ``selenium`` package.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User

from tests.support.users import login

__all__ = ["Browser", "browser_missing", "open_browser"]

CHROMIUM = os.environ.get("OCCUPY_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("OCCUPY_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
#: Where each state of the pages is photographed (ignored by git).
SCREENSHOTS = Path(__file__).resolve().parent.parent / ".screenshots"


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

        found: list[Any] = self.driver.find_elements(By.CSS_SELECTOR, css)
        return found

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
        return str(self.find(css).text)

    def screenshot(self, name: str) -> None:
        SCREENSHOTS.mkdir(exist_ok=True)
        self.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))

    def quit(self) -> None:
        """Close the browser."""
        self.driver.quit()


def open_browser(base: str, user: User) -> Browser:
    """Start a headless Chromium on the site at ``base``, logged in as ``user``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which(CHROMIUM) or CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--disable-gpu",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        session = login(user).cookies[settings.SESSION_COOKIE_NAME].value
        driver.get(f"{base}/static/admin/css/base.css")  # same origin, cheap
        driver.add_cookie({"name": settings.SESSION_COOKIE_NAME, "value": session, "path": "/"})
    except BaseException:
        driver.quit()
        raise
    return Browser(driver, base, user.username)
