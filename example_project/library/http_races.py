"""``race_demo``'s HTTP rows: the borrow counter as client processes doing
GET → PATCH ``borrow_count + 1`` over real HTTP, against the example site served on a
free port by the demo itself, signed in by HTTP Basic as a throwaway user.

- plain DRF (a ``ModelViewSet`` saving the row as it was read): every PATCH is 200,
  and increments are lost;
- ``If-Match`` with the ETag of the GET: a stale one is 412 and the client reads again
  and retries (a write that collides with another one in flight is 423 and is retried
  too); none lost;
- edit leases: the client takes the book's lease (``POST …/lease/``), reads, writes with
  the token, releases; while someone holds it the others get 423 with ``Retry-After``
  and ask again (sooner than ``Retry-After`` says, knowing the edits are short); none
  lost.

A client gives an increment up after ``ATTEMPTS`` refusals: that is the ``refused``
column, as in the other rows; the 412 and 423 answers it retried are the row's note.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import random
import secrets
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from typing import Any

from example_project.library.races import Outcome, Row, _in_processes, _start_barrier, _timed

PROCESSES = 4
TIMES = 10
ATTEMPTS = 50
DEMO_USER = "race-demo"


# --- in the client processes: HTTP only ----------------------------------------------
class Client:
    """Requests to the demo site as one user, by HTTP Basic (picklable)."""

    def __init__(self, base: str, user: str, password: str) -> None:
        self.base = base
        self.authorization = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def call(
        self, method: str, path: str, body: dict | None = None, **headers: str
    ) -> tuple[int, Any, Any]:
        """Send one request; return the status, the headers and the JSON body."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", self.authorization)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in headers.items():
            request.add_header(name.replace("_", "-"), value)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, head, raw = response.status, response.headers, response.read()
        except urllib.error.HTTPError as e:
            status, head, raw = e.code, e.headers, e.read()
        return status, head, json.loads(raw) if raw else None


def _refused(status: int, head: Any, body: Any, answers: Counter) -> None:
    """Count a refusal the client will retry; a 423 must say when to come back."""
    if status == 423 and not int(head.get("Retry-After", 0)) >= 1:
        raise AssertionError(f"a 423 without Retry-After: {body}")
    if status not in (412, 423):
        raise AssertionError(f"unexpected {status}: {body}")
    answers[status] += 1
    time.sleep(random.uniform(0.005, 0.02))


def _plain(client: Client, pk: int, answers: Counter) -> bool:
    _status, _head, book = client.call("GET", f"/demo/plain-books/{pk}/")
    time.sleep(0.002)
    status, _head, body = client.call(
        "PATCH", f"/demo/plain-books/{pk}/", {"borrow_count": book["borrow_count"] + 1}
    )
    if status != 200:
        raise AssertionError(f"plain DRF answered {status}: {body}")
    return True


def _if_match(client: Client, pk: int, answers: Counter) -> bool:
    url = f"/api/books/{pk}/"
    _status, head, book = client.call("GET", url)
    time.sleep(0.002)
    status, head, body = client.call(
        "PATCH", url, {"borrow_count": book["borrow_count"] + 1}, If_Match=head["ETag"]
    )
    if status == 200:
        return True
    _refused(status, head, body, answers)
    return False


def _leased(client: Client, pk: int, answers: Counter) -> bool:
    url = f"/api/books/{pk}/"
    status, head, lease = client.call("POST", f"{url}lease/", {"ttl": 10})
    if status != 201:
        _refused(status, head, lease, answers)
        return False
    try:
        _status, head, book = client.call("GET", url)
        time.sleep(0.002)
        status, _head, body = client.call(
            "PATCH",
            url,
            {"borrow_count": book["borrow_count"] + 1},
            If_Match=head["ETag"],
            Occupy_Lease=lease["token"],
        )
        if status != 200:
            raise AssertionError(f"a write under the lease answered {status}: {body}")
    finally:
        status, _head, body = client.call("DELETE", f"{url}lease/", Occupy_Lease=lease["token"])
        if status != 204:
            raise AssertionError(f"releasing the lease answered {status}: {body}")
    return True


TECHNIQUES = {"plain": _plain, "if-match": _if_match, "lease": _leased}


def _borrow_over_http(
    technique: str, client: Client, pk: int, times: int, barrier: Any
) -> tuple[int, Counter]:
    """Count ``times`` borrowings by GET → PATCH; return the increments given up after
    ``ATTEMPTS`` refusals and the refusals retried, by status."""
    borrow = TECHNIQUES[technique]
    answers: Counter = Counter()
    refused = 0
    barrier.wait()
    for _ in range(times):
        if not any(borrow(client, pk, answers) for _ in range(ATTEMPTS)):
            refused += 1
    return refused, answers


# --- in the demo process ---------------------------------------------------------------
@contextlib.contextmanager
def demo_site() -> Iterator[tuple[str, str, str]]:
    """Serve the site (with the plain control route) on a free port, with a throwaway
    user who may change books; yield its URL, name and password; delete the user."""
    from django.contrib.auth.models import Permission, User
    from django.test.utils import override_settings

    from example_project.library.server import serve

    password = secrets.token_urlsafe(16)
    # HTTP Basic checks the password on every request, and the default hasher is slow
    # on purpose: the throwaway user's password is hashed with a fast one.
    with override_settings(
        ROOT_URLCONF="example_project.library.demo_urls",
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
    ):
        User.objects.filter(username=DEMO_USER).delete()
        user = User.objects.create_user(DEMO_USER, password=password)
        user.user_permissions.set(
            Permission.objects.filter(
                content_type__app_label="library", codename__in=["change_book", "view_book"]
            )
        )
        requests = logging.getLogger("django.request")
        level = requests.level
        requests.setLevel(logging.ERROR)  # not a warning line per 412 and 423
        try:
            with serve() as url:
                yield url, DEMO_USER, password
        finally:
            requests.setLevel(level)
            user.delete()


def borrow_over_http(technique: str, processes: int = PROCESSES, times: int = TIMES) -> Outcome:
    """The borrow counter over HTTP: ``processes`` clients each count ``times``
    borrowings of one book by ``technique`` (see :data:`TECHNIQUES`)."""
    from example_project.library.models import Book

    book = Book.objects.create(name="counter over HTTP", borrow_count=0)
    try:
        with demo_site() as (url, user, password), _timed() as elapsed:
            results = _in_processes(
                _borrow_over_http,
                [
                    (
                        technique,
                        Client(url, user, password),
                        book.pk,
                        times,
                        _start_barrier(processes),
                    )
                ]
                * processes,
            )
        book.refresh_from_db()
    finally:
        Book.objects.filter(pk=book.pk).delete()
    refused = sum(r for r, _ in results)
    answers = sum((a for _, a in results), Counter())
    note = ", ".join(f"{n} × {status}" for status, n in sorted(answers.items()))
    return Outcome(
        processes * times,
        processes * times - refused - book.borrow_count,
        refused,
        elapsed[0],
        f"the clients retried after {note}" if note else "",
    )


RACE = "borrow counter over HTTP"
HTTP_ROWS = [
    Row(RACE, "plain DRF ModelViewSet", lambda: borrow_over_http("plain")),
    Row(RACE, "DRF + If-Match, retry on 412", lambda: borrow_over_http("if-match")),
    Row(RACE, "DRF + edit lease, 423 while held", lambda: borrow_over_http("lease")),
]
