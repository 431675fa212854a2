"""API clients that run in spawned processes and talk HTTP to the test server."""

from __future__ import annotations

import json
import time
from typing import Any


def call(method: str, url: str, user: str, body: dict[str, Any] | None = None,
         **headers: str) -> tuple[int, dict[str, str], Any]:
    """Send one request as ``user`` (HTTP Basic); return status, headers and JSON body."""
    from tests.support.live_server import send
    from tests.support.users import PASSWORD

    status, head, raw = send(method, url, user=user, password=PASSWORD, body=body, **headers)
    try:
        return status, head, json.loads(raw) if raw else None
    except ValueError:
        raise AssertionError(f"{method} {url} answered {status} with no JSON: {raw[:3000]!r}"
                             ) from None


def append_at_once(url: str, user: str, name: str, rounds: int, barrier: Any,
                   field: str = "note") -> list[int]:
    """Each round, at the same moment as another process: read the row, append ``name``
    to its ``field``, and PATCH it back with the ETag read (when the API gives one);
    return the statuses."""
    statuses = []
    for _ in range(rounds):
        barrier.wait(timeout=60)
        _status, head, body = call("GET", url, user)
        barrier.wait(timeout=60)
        condition = {"If_Match": head["ETag"]} if "ETag" in head else {}
        status, _head, _body = call("PATCH", url, user, {field: body[field] + name},
                                    **condition)
        statuses.append(status)
    return statuses


def edit_under_lease(url: str, user: str, rounds: int) -> list[int]:
    """Take the edit lease, read, pause, write with the token and the version read,
    release; return the write statuses (200 unless someone wrote inside the lease)."""
    statuses = []
    for r in range(rounds):
        while True:
            status, _head, body = call("POST", url + "lease/", user, {"ttl": 30})
            if status == 201:
                token = body["token"]
                break
            assert status == 423, (status, body)
            time.sleep(0.01)
        _status, head, _body = call("GET", url, user)
        time.sleep(0.05)  # the window a write without the lease would need
        status, _head, body = call("PATCH", url, user, {"body": f"leased-{r}"},
                                   If_Match=head["ETag"], Occupy_Lease=token)
        statuses.append(status)
        assert call("DELETE", url + "lease/", user, Occupy_Lease=token)[0] == 204
        time.sleep(0.02)
    return statuses


def write_without_lease(url: str, user: str, seconds: float) -> list[int]:
    """Read and write without a lease for ``seconds``; return the write statuses."""
    statuses = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _status, head, _body = call("GET", url, user)
        status, _head, _body = call("PATCH", url, user, {"body": "unleased"},
                                    If_Match=head["ETag"])
        statuses.append(status)
        time.sleep(0.005)
    return statuses


def lease_race(role: str, url: str, user: str) -> list[int]:
    """One side of the lease race: ``"lease"`` edits under leases, ``"free"`` writes
    without one for the same time."""
    if role == "lease":
        return edit_under_lease(url, user, 10)
    return write_without_lease(url, user, 3.0)
