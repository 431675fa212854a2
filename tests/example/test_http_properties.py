"""The example API over real HTTP, property-based, while its lock store goes away and
comes back: no request ever gets a 500.

The example site runs in a server process of its own with its edit leases (its
``default`` lock backend) on a Redis server this test starts on a spare port. Hypothesis
draws requests to every operation of the API's OpenAPI schema (schemathesis builds each
from the schema: lists, objects, their writes, the lease actions ``…/lease/`` GET, POST,
PATCH, DELETE, ``…/lease/release/`` and ``…/lease/takeover/``) and draws beside each one
who sends it (an editor with every permission, a signed-in reader with none, or
nobody), what it accepts (JSON, or ``text/html``: the browsable API renders the answer
with its forms), and the headers and values that have given 500s before: an
``If-Match`` of thousands of digits, foreign, malformed or huge ``Occupy-Lease`` tokens,
odd ``Occupy-Client`` names, and lease ``ttl`` s that are not numbers in range.

The draws run in four stretches: the store up (no 5xx at all); the store stopped
mid-traffic, a fifth of the way into the stretch (503 is the contract's answer then, 500
never); the store started again a fifth of the way into the next one (503 until it
answers, 500 never); the store up again (no 5xx at all). The switch is counted in
requests, not seconds, so the stretch always goes on after it: the stop (or start) runs
beside the requests drawn next and is waited for before the stretch's second half.
Every failure is collected and all are told at the end, so the run is bounded:
Hypothesis does not shrink.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from requests.exceptions import InvalidJSONError

from tests.support.aliases import server_skip
from tests.support.example_site import PASSWORD, Site, call, run_site
from tests.support.ports import spare_port
from tests.support.redis_server import REDIS_SERVER, RedisServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or ""),
    # Where the servers are required (CI), a missing redis-server fails the test.
    pytest.mark.skipif(
        REDIS_SERVER is None and os.environ.get("OCCUPY_REQUIRE_SERVERS") != "1",
        reason="redis-server is not on PATH",
    ),
]

#: Requests drawn per stretch, over all the operations at once (so the store's
#: stopping and starting falls on whichever operation is running then); each stretch
#: draws from a seed of its own, the same every run.
EXAMPLES = 100
#: After how many of its stretch's requests the store begins to stop (or start again),
#: and after how many the switch must be complete.
SWITCH_AT = EXAMPLES // 5
SWITCHED_BY = EXAMPLES // 2
#: Who sends a request: mostly the editor, whose requests reach the locks and leases.
USERS = ("editor", "editor", "reader", None)
ACCEPTS = ("application/json", "text/html", "text/html; q=1.0, */*")
#: Printable ASCII: what HTTP header values can carry.
ASCII = st.characters(min_codepoint=32, max_codepoint=126)
DIGITS = "9" * 5000
IF_MATCH = st.one_of(
    st.none(),
    st.none(),
    st.sampled_from(
        [
            '"1"',
            '"2"',
            'W/"1"',
            "*",
            '"1", "2"',
            f'"{DIGITS}"',
            DIGITS,
            '"-1"',
            '""',
            '"1.5"',
            "garbage",
            '"1" junk',
            " , ",
        ]
    ),
    st.text(ASCII, max_size=40),
)
TTL = st.one_of(
    # NaN and infinities are not JSON: as strings below, where a client can send them.
    st.none(),
    st.integers(-10, 10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.sampled_from(["1e-300", "nan", "inf", "10", "", DIGITS, "0x10"]),
    st.text(ASCII, max_size=12),
)


def _basic(user: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()


@dataclass
class Stretch:
    """One stretch of the run: its name, whether 503 may answer, and what went wrong."""

    name: str
    may_be_unavailable: bool
    failures: list[str] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)


@pytest.fixture(scope="module")
def lease_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server of the test's own, for the example site's edit leases."""
    server = RedisServer(spare_port(), tmp_path_factory.mktemp("lease-redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def site(lease_store: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The example site with its leases on :func:`lease_store`."""
    with run_site(
        tmp_path_factory.mktemp("example-redis"), EXAMPLE_LEASE_REDIS=lease_store.url
    ) as running:
        yield running


class Switch:
    """What happens to the store during a stretch: ``action`` (its ``stop`` or
    ``start``, or nothing) begins on a thread of its own before request
    :data:`SWITCH_AT`, beside the requests that follow, and is waited for before request
    :data:`SWITCHED_BY`."""

    def __init__(self, action: Callable[[], None] | None) -> None:
        self.action = action
        self.sent = 0
        self.thread: threading.Thread | None = None

    def before_request(self) -> None:
        """Count a request about to be sent, starting or awaiting the action first."""
        if self.action is not None and self.sent == SWITCH_AT:
            self.thread = threading.Thread(target=self.action)
            self.thread.start()
        elif self.sent == SWITCHED_BY:
            self.wait()
        self.sent += 1

    def wait(self) -> None:
        """Wait (at most 30 s) for the action to end."""
        if self.thread is not None:
            self.thread.join(timeout=30)
            assert not self.thread.is_alive(), f"{self.action} did not end in 30 s"


def _objects(site: Site) -> dict[str, list[int]]:
    """Create a few books and tasks (a DELETE drawn may take one away); return their ids."""
    ids: dict[str, list[int]] = {"books": [], "tasks": []}
    for kind, body in (("books", {"name": "drawn"}), ("tasks", {"title": "drawn"})):
        for _ in range(3):
            status, _head, raw = call("POST", f"{site.url}/api/{kind}/", "editor", body)
            assert status == 201, raw
            ids[kind].append(json.loads(raw)["id"])
    return ids


def _tokens(site: Site, ids: dict[str, list[int]]) -> list[str]:
    """Return real lease tokens: one still held by the editor, one released."""
    tokens = []
    for pk in ids["books"][:2]:
        status, _head, raw = call(
            "POST", f"{site.url}/api/books/{pk}/lease/", "editor", {"ttl": 600}
        )
        assert status == 201, raw
        tokens.append(json.loads(raw)["token"])
    status, _head, raw = call(
        "DELETE", f"{site.url}/api/books/{ids['books'][1]}/lease/", "editor", Occupy_Lease=tokens[1]
    )
    assert status == 204, raw
    return tokens


def _judge(stretch: Stretch, label: str, extra: dict[str, Any], response: Any) -> None:
    """Record a failure: any 5xx, but 503 while the store may be unavailable (whose
    JSON body must then say ``store_unavailable``)."""
    status = response.status_code
    stretch.statuses[status] = stretch.statuses.get(status, 0) + 1
    if status < 500:
        return
    if status == 503 and stretch.may_be_unavailable:
        if response.headers.get("Content-Type", "").startswith("application/json"):
            code = (response.json() or {}).get("code")
            if code != "store_unavailable":
                stretch.failures.append(f"{label} {extra}: 503 with code {code!r}")
        return
    shown = {
        k: (v[:40] + "…" if isinstance(v, str) and len(v) > 40 else v) for k, v in extra.items()
    }
    stretch.failures.append(f"{label} {shown}: {status} {response.text[:300]!r}")


def _draw_requests(
    site: Site,
    operations: list[Any],
    ids: dict[str, list[int]],
    tokens: list[str],
    stretch: Stretch,
    number: int,
    switch: Switch,
) -> None:
    """Send ``EXAMPLES`` drawn requests, turning ``switch`` as they go; judge each
    answer into ``stretch``."""
    cases = st.one_of([st.tuples(st.just(op), op.as_strategy()) for op in operations])
    extras = st.fixed_dictionaries(
        {
            "user": st.sampled_from(USERS),
            "accept": st.sampled_from(ACCEPTS),
            "pick": st.integers(0, 2),
            "If-Match": IF_MATCH,
            "Occupy-Lease": st.one_of(
                st.none(),
                st.none(),
                st.sampled_from([*tokens, "x" * 5000, "not a token", "-"]),
                st.text(ASCII, max_size=60),
            ),
            "Occupy-Client": st.one_of(st.none(), st.text(ASCII, max_size=100)),
            "ttl": TTL,
        }
    )

    @seed(number)
    @given(drawn=cases, extra=extras)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(drawn: tuple[Any, Any], extra: dict[str, Any]) -> None:
        switch.before_request()
        operation, case = drawn
        kind = operation.path.split("/")[2]
        if "id" in (case.path_parameters or {}):
            case.path_parameters["id"] = ids[kind][extra["pick"]]
        headers = {"Accept": extra["accept"]}
        if extra["user"] is not None:
            headers["Authorization"] = _basic(extra["user"])
        for name in ("If-Match", "Occupy-Lease", "Occupy-Client"):
            if extra[name] is not None:
                headers[name] = extra[name]
        if (
            "/lease/" in operation.path
            and extra["ttl"] is not None
            and case.media_type == "application/json"
        ):
            case.body = {"ttl": extra["ttl"]}
        case.headers = {**(case.headers or {}), **headers}
        try:
            response = case.call(base_url=site.url, timeout=60)
        except (ValueError, InvalidJSONError):  # a draw requests cannot send
            return
        _judge(
            stretch, operation.label, {k: v for k, v in extra.items() if v is not None}, response
        )

    try:
        run()
    finally:
        switch.wait()
    assert switch.sent > SWITCHED_BY, f"only {switch.sent} requests were drawn"


def test_no_request_gets_a_500_while_the_lock_store_goes_and_comes_back(
    site: Site, lease_store: RedisServer
) -> None:
    schema = schemathesis.openapi.from_url(f"{site.url}/api/schema/?format=json")
    operations = [
        result.ok()
        for result in schema.get_all_operations()
        if not result.ok().path.startswith("/api/schema")
    ]
    labels = {op.label for op in operations}
    for kind in ("books", "tasks"):  # the lease actions are part of the draw
        assert {
            f"POST /api/{kind}/{{id}}/lease/",
            f"PATCH /api/{kind}/{{id}}/lease/",
            f"GET /api/{kind}/{{id}}/lease/",
            f"DELETE /api/{kind}/{{id}}/lease/",
            f"POST /api/{kind}/{{id}}/lease/release/",
            f"POST /api/{kind}/{{id}}/lease/takeover/",
        } <= labels, labels
    stretches = [
        Stretch("store up", False),
        Stretch("store stopping, then down", True),
        Stretch("store starting again", True),
        Stretch("store up again", False),
    ]
    tokens: list[str] = []
    for number, stretch in enumerate(stretches):
        ids = _objects(site)  # creating needs no lock store
        if number == 0:
            tokens = _tokens(site, ids)
        switch = Switch({1: lease_store.stop, 2: lease_store.start}.get(number))
        if number == 3:
            _wait_for_the_store(site, ids["books"][0])
        _draw_requests(site, operations, ids, tokens, stretch, number, switch)
    for stretch in stretches:  # shown with -s, and in a failure's report
        print(f"{stretch.name}: {dict(sorted(stretch.statuses.items()))}")
    down = stretches[1].statuses.get(503, 0)
    assert down > 0, f"the store's outage was never seen: {stretches[1].statuses}"
    failures = [f"[{s.name}] {failure}" for s in stretches for failure in s.failures]
    assert not failures, f"{len(failures)} server error(s):\n" + "\n".join(failures)


def _wait_for_the_store(site: Site, pk: int) -> None:
    """Wait (at most 20 s) until the site reaches the restarted store again."""
    for _ in range(200):
        status, _head, _raw = call("GET", f"{site.url}/api/books/{pk}/lease/", "editor")
        if status == 200:
            return
        threading.Event().wait(0.1)
    raise AssertionError("the example site never reached the restarted lock store")


@pytest.mark.parametrize("accept", ["text/html", "application/json"])
def test_the_requests_that_gave_500s_before(site: Site, accept: str) -> None:
    """The draws above reach these too; named here so that each is sent every run."""
    ids = _objects(site)
    book = f"{site.url}/api/books/{ids['books'][0]}/"
    answers = {}
    status, _head, raw = call("POST", f"{book}lease/", "editor", {"ttl": 30}, Accept=accept)
    answers["POST lease"] = status
    if accept == "application/json" and status in (200, 201):
        token = json.loads(raw)["token"]
        answers["PATCH lease"] = call(
            "PATCH", f"{book}lease/", "editor", {"ttl": 30}, Accept=accept, Occupy_Lease=token
        )[0]
        answers["DELETE lease"] = call(
            "DELETE", f"{book}lease/", "editor", Accept=accept, Occupy_Lease=token
        )[0]
    answers["If-Match of 5,000 digits"] = call(
        "PATCH", book, "editor", {"name": "x"}, Accept=accept, If_Match=f'"{DIGITS}"'
    )[0]
    for ttl in (True, "1e-300", DIGITS, float("inf")):
        answers[f"ttl {str(ttl)[:10]}"] = call(
            "POST", f"{book}lease/", "editor", {"ttl": ttl}, Accept=accept
        )[0]
    answers["takeover"] = call(
        "POST", f"{book}lease/takeover/", "editor", {"ttl": 5}, Accept=accept
    )[0]
    answers["API root"] = call("GET", f"{site.url}/api/", "reader", Accept=accept)[0]
    errors = {name: status for name, status in answers.items() if status >= 500}
    assert not errors, f"server errors ({accept}): {errors}"
