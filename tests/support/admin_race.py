"""Workers of the admin's takeover race, each a browser-like HTTP client (a session
cookie, the CSRF token) in a spawned process (tests/support/multiproc.py): the editor
opens the change form and renews her lease; another editor, without the takeover
permission, takes over his own lease while he lets it go; a supervisor takes over
whoever edits.
"""

from __future__ import annotations

import http.cookiejar
import json
import random
import re
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

__all__ = ["AdminClient", "editor_loop", "own_takeover_loop", "race_worker", "supervisor_loop"]

_STATE = re.compile(r'id="occupy-lease"[^>]*data-state="(\w+)"')
_TAB = re.compile(r'name="_occupy_tab" value="([0-9a-f]+)"')
_TOKEN = re.compile(r'name="_occupy_lease" value="([0-9a-f]+)"')


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class AdminClient:
    """One logged-in admin user talking HTTP to the live server."""

    def __init__(self, base: str, session_cookie: tuple[str, str]) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        host = urllib.parse.urlsplit(base).hostname or "127.0.0.1"
        for name, value in (session_cookie,):
            self.jar.set_cookie(
                http.cookiejar.Cookie(
                    0,
                    name,
                    value,
                    None,
                    False,
                    host,
                    False,
                    False,
                    "/",
                    True,
                    False,
                    None,
                    False,
                    None,
                    None,
                    {},
                )
            )
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect
        )
        self.request("GET", "/admin/")  # the CSRF cookie (the logout form sets it)
        if not self.csrf():
            raise AssertionError("the admin's index set no CSRF cookie")

    def csrf(self) -> str:
        return next((c.value or "" for c in self.jar if c.name == "csrftoken"), "")

    def request(
        self, method: str, path: str, data: dict[str, Any] | None = None
    ) -> tuple[int, str, dict[str, str]]:
        """Send one request; return the status, the body and the headers."""
        body = None
        headers = {}
        if data is not None:
            body = urllib.parse.urlencode(
                {**data, "csrfmiddlewaretoken": self.csrf()}, doseq=True
            ).encode()
            headers = {
                "X-CSRFToken": self.csrf(),
                "Content-Type": "application/x-www-form-urlencoded",
            }
        request = urllib.request.Request(
            self.base + path, data=body, method=method, headers=headers
        )
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.read().decode(), dict(response.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def open_form(self, path: str) -> tuple[str, str, str]:
        """GET the change form: return its lease state, tab and (first) token."""
        status, html, _headers = self.request("GET", path)
        if status != 200:
            raise AssertionError(f"GET {path} answered {status}")
        state, tab, token = _STATE.search(html), _TAB.search(html), _TOKEN.search(html)
        return (state[1] if state else "", tab[1] if tab else "", token[1] if token else "")


#: Each loop runs at least its ``seconds`` and until it has made ``ROUNDS`` tries, but
#: never past ``CAP`` times its ``seconds`` (a loaded machine makes few per second).
ROUNDS = 10
CAP = 5


class _Clock:
    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.seconds = seconds

    def going(self, tries: int) -> bool:
        elapsed = time.monotonic() - self.start
        return elapsed < self.seconds * CAP and (elapsed < self.seconds or tries < ROUNDS)


def _take(client: AdminClient, obj: str, tab: str) -> str | None:
    """Take the object for ``tab`` as the page's script does when its lease is gone
    (``renew/`` with ``reacquire=1``); return the token, or ``None`` when held."""
    status, body, _headers = client.request(
        "POST", obj + "occupy/renew/", {"_occupy_tab": tab, "reacquire": "1"}
    )
    if status == 409:
        return None
    if status != 200:
        raise AssertionError(f"reacquire answered {status}: {body[:500]}")
    token: str = json.loads(body)["tokens"][0]
    return token


def editor_loop(base: str, cookie: tuple[str, str], obj: str, seconds: float) -> dict[str, int]:
    """Take her lease (as her page does), renew it twice, release it; again, for
    ``seconds``. Return her grants and how many of them a renewal found lost."""
    client = AdminClient(base, cookie)
    grants = lost = 0
    tab = secrets.token_hex(8)
    clock = _Clock(seconds)
    while clock.going(grants):
        token = _take(client, obj, tab)
        if token is None:
            time.sleep(random.uniform(0, 0.003))
            continue
        grants += 1
        body = {"_occupy_tab": tab, "_occupy_lease": token}
        for _ in range(2):
            time.sleep(random.uniform(0, 0.003))
            status, _html, _headers = client.request("POST", obj + "occupy/renew/", body)
            if status == 409:
                lost += 1
                break
            if status != 200:
                raise AssertionError(f"renew answered {status}")
        else:
            client.request("POST", obj + "occupy/release/", body)
        time.sleep(random.uniform(0, 0.003))
    return {"grants": grants, "lost": lost}


def own_takeover_loop(
    base: str, cookie: tuple[str, str], obj: str, seconds: float
) -> dict[str, int]:
    """Without the takeover permission: take the object when free, then take his own
    lease over into a second tab while the first lets it go (the editor may get it in
    between: then the takeover must not replace her). Return the answers."""
    client = AdminClient(base, cookie)
    answers: dict[str, int] = {}
    clock = _Clock(seconds)
    while clock.going(sum(answers.values())):
        first = secrets.token_hex(8)
        token = _take(client, obj, first)
        if token is None:
            time.sleep(random.uniform(0, 0.003))
            continue
        release = threading.Thread(
            target=lambda tab=first, token=token: (
                time.sleep(random.uniform(0, 0.003)),
                client.request(
                    "POST", obj + "occupy/release/", {"_occupy_tab": tab, "_occupy_lease": token}
                ),
            )
        )
        release.start()
        second = secrets.token_hex(8)
        status, _html, headers = client.request(
            "POST", obj + "occupy/takeover/", {"_occupy_tab": second}
        )
        release.join()
        took = status == 302 and f"_occupy_tab={second}" in headers.get("Location", "")
        answer = "took" if took else str(status)
        answers[answer] = answers.get(answer, 0) + 1
        if took:  # give it back: the second tab's lease, found as its page would
            token = _take(client, obj, second)
            if token is not None:
                client.request(
                    "POST", obj + "occupy/release/", {"_occupy_tab": second, "_occupy_lease": token}
                )
    return answers


def supervisor_loop(base: str, cookie: tuple[str, str], obj: str, seconds: float) -> dict[str, int]:
    """With the takeover permission: now and then take over whoever edits, then let
    go. Return how many takeovers were posted."""
    client = AdminClient(base, cookie)
    posted = 0
    clock = _Clock(seconds)
    while clock.going(posted):
        time.sleep(random.uniform(0.02, 0.08))
        tab = secrets.token_hex(8)
        status, _html, _headers = client.request(
            "POST", obj + "occupy/takeover/", {"_occupy_tab": tab}
        )
        posted += 1
        if status == 302:
            token = _take(client, obj, tab)
            if token is not None:
                client.request(
                    "POST", obj + "occupy/release/", {"_occupy_tab": tab, "_occupy_lease": token}
                )
    return {"posted": posted}


def race_worker(
    role: str, base: str, cookie: tuple[str, str], obj: str, seconds: float
) -> dict[str, int]:
    """Run the loop of ``role`` (``editor``, ``other``, ``supervisor``)."""
    loop = {"editor": editor_loop, "other": own_takeover_loop, "supervisor": supervisor_loop}[role]
    return loop(base, cookie, obj, seconds)
