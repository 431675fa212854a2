"""API clients that run in spawned processes and talk HTTP to the test server."""

from __future__ import annotations

import json
import time
from typing import Any


def call(
    method: str, url: str, user: str, body: dict[str, Any] | None = None, **headers: str
) -> tuple[int, dict[str, str], Any]:
    """Send one request as ``user`` (HTTP Basic); return status, headers and JSON body."""
    from tests.support.live_server import send
    from tests.support.users import PASSWORD

    status, head, raw = send(method, url, user=user, password=PASSWORD, body=body, **headers)
    try:
        return status, head, json.loads(raw) if raw else None
    except ValueError:
        raise AssertionError(
            f"{method} {url} answered {status} with no JSON: {raw[:3000]!r}"
        ) from None


def append_at_once(
    url: str, user: str, name: str, rounds: int, barrier: Any, field: str = "note"
) -> list[int]:
    """Each round, at the same moment as another process: read the row, append ``name``
    to its ``field``, and PATCH it back with the ETag read (when the API gives one);
    return the statuses."""
    statuses = []
    for _ in range(rounds):
        barrier.wait(timeout=60)
        _status, head, body = call("GET", url, user)
        barrier.wait(timeout=60)
        condition = {"If_Match": head["ETag"]} if "ETag" in head else {}
        status, _head, _body = call("PATCH", url, user, {field: body[field] + name}, **condition)
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
        status, _head, body = call(
            "PATCH", url, user, {"body": f"leased-{r}"}, If_Match=head["ETag"], Occupy_Lease=token
        )
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
        status, _head, _body = call("PATCH", url, user, {"body": "unleased"}, If_Match=head["ETag"])
        statuses.append(status)
        time.sleep(0.005)
    return statuses


def lease_race(role: str, url: str, user: str) -> list[int]:
    """One side of the lease race: ``"lease"`` edits under leases, ``"free"`` writes
    without one for the same time."""
    if role == "lease":
        return edit_under_lease(url, user, 10)
    return write_without_lease(url, user, 3.0)


def append_until_written(url: str, user: str, name: str, rounds: int) -> list[int]:
    """``rounds`` times: read the row, append ``name`` to its ``body`` and PATCH it back
    with the ETag read, re-reading on 412 until it is written (bounded); return every
    PATCH status, and the ``Retry-After`` of any 423 after it as ``-seconds``."""
    statuses: list[int] = []
    for _ in range(rounds):
        for _attempt in range(200):
            _status, head, body = call("GET", url, user)
            status, head, _body = call(
                "PATCH", url, user, {"body": body["body"] + name}, If_Match=head["ETag"]
            )
            statuses.append(status)
            if status == 423:
                statuses.append(-int(head["Retry-After"]))
            if status != 412:
                break
    return statuses


def patch_while_leased(url: str, user: str, tries: int) -> list[tuple[float, float, int, str, Any]]:
    """PATCH ``tries`` times while someone else holds an edit lease; return each answer
    as (when the PATCH was sent, when its answer came, its status, its ``Retry-After``,
    the holder named)."""
    answers = []
    for _ in range(tries):
        _status, head, body = call("GET", url, user)
        sent = time.time()
        status, head, body = call("PATCH", url, user, {"body": "intruder"}, If_Match=head["ETag"])
        holder = (body or {}).get("holder") or {}
        answers.append(
            (sent, time.time(), status, head.get("Retry-After", ""), holder.get("owner_display"))
        )
        time.sleep(0.05)
    return answers


def _going(deadline: float, stop: Any) -> bool:
    """Return whether a race loop goes on: before ``deadline``, ``stop`` (an event) unset."""
    return time.monotonic() < deadline and not stop.is_set()


def hold_and_renew(url: str, user: str, seconds: float, stop: Any) -> dict[str, int]:
    """The first user of the takeover race: take the lease (waiting out 423s), renew it
    a few times, release it; for ``seconds`` or until ``stop`` is set. Return how many
    grants she got and how many of them were lost (a renew or release answered 409)."""
    grants = lost = 0
    deadline = time.monotonic() + seconds
    while _going(deadline, stop):
        status, _head, body = call("POST", url + "lease/", user, {"ttl": 30})
        if status == 423:
            time.sleep(0.002)
            continue
        assert status == 201, (status, body)
        grants += 1
        token = body["token"]
        held = True
        for _ in range(3):
            time.sleep(0.05)
            status, _head, body = call(
                "PATCH", url + "lease/", user, {"ttl": 30}, Occupy_Lease=token
            )
            if status != 200:
                assert status == 409, (status, body)
                held = False
                break
        if held:
            status, _head, body = call("DELETE", url + "lease/", user, Occupy_Lease=token)
            held = status == 204
        lost += not held
        time.sleep(0.05)  # between two edits: the other side gets its turn
    return {"grants": grants, "lost": lost}


def take_over_own(url: str, user: str, seconds: float, stop: Any) -> list[tuple[int, Any]]:
    """The second user of the takeover race (no takeover permission): keep taking his
    own lease over (another of his processes takes and releases it), releasing what he
    gets; for ``seconds`` or until ``stop`` is set. Return every takeover's status and
    the holder it says it replaced."""
    answers = []
    deadline = time.monotonic() + seconds
    while _going(deadline, stop):
        status, _head, body = call("POST", url + "lease/takeover/", user, {"ttl": 1})
        assert status in (201, 403, 423), (status, body)
        replaced = (body or {}).get("replaced") if status == 201 else None
        answers.append((status, None if replaced is None else replaced["owner_display"]))
        if status == 201:
            call("DELETE", url + "lease/", user, Occupy_Lease=body["token"])
        else:
            time.sleep(0.005)
    return answers


def flicker(url: str, user: str, seconds: float, stop: Any) -> int:
    """Take a short lease, hold it a moment and release it, over and over, for
    ``seconds`` or until ``stop`` is set: the holder the other side reads keeps ending;
    return how many leases were taken."""
    taken = 0
    deadline = time.monotonic() + seconds
    while _going(deadline, stop):
        status, _head, body = call("POST", url + "lease/", user, {"ttl": 1})
        if status == 201:
            taken += 1
            time.sleep(0.15)
            call("DELETE", url + "lease/", user, Occupy_Lease=body["token"])
        time.sleep(0.005)
    return taken


def takeover_race(role: str, url: str, user: str, seconds: float, stop: Any) -> Any:
    """One side of the takeover race, for ``seconds`` or until ``stop`` (an event) is
    set: ``"hold"`` takes and renews leases, ``"take"`` keeps taking his own lease
    over, ``"flicker"`` takes his lease and lets it go."""
    if role == "hold":
        return hold_and_renew(url, user, seconds, stop)
    if role == "flicker":
        return flicker(url, user, seconds, stop)
    return take_over_own(url, user, seconds, stop)


def plain_appends(url: str, user: str, name: str, rounds: int) -> list[tuple[int, Any, Any]]:
    """Read the row and PATCH ``name`` appended to its ``note``, ``rounds`` times, as a
    client of a plain DRF API does (no precondition); return each answer's status,
    ``ETag`` and ``code``."""
    answers = []
    for _ in range(rounds):
        _status, _head, body = call("GET", url, user)
        status, head, body = call("PATCH", url, user, {"note": body["note"] + name})
        answers.append((status, head.get("ETag"), (body or {}).get("code")))
    return answers


def write_any_version(url: str, user: str, name: str, rounds: int) -> list[tuple[int, Any]]:
    """PATCH ``rounds`` values into the row's ``body`` with ``If-Match: *`` (any current
    version), with no GET in between; return each answer's status and code."""
    answers = []
    for r in range(rounds):
        status, _head, body = call("PATCH", url, user, {"body": f"{name}-{r}"}, If_Match="*")
        answers.append((status, (body or {}).get("code") if isinstance(body, dict) else None))
    return answers


def queued_editor(url: str, user: str, name: str, rounds: int, wait: int) -> dict[str, Any]:
    """The queued editor's loop, ``rounds`` times: take the edit lease waiting in the
    key's queue (``Prefer: wait``), read the row, append ``name`` to its ``body`` and
    PATCH it with the ETag read and the lease's token, release the lease. Return every
    status by step, and what ``Preference-Applied`` said."""
    out: dict[str, Any] = {"lease": [], "get": [], "patch": [], "release": [], "applied": set()}
    for _ in range(rounds):
        status, head, body = call("POST", url + "lease/", user, {"ttl": 30}, Prefer=f"wait={wait}")
        out["lease"].append(status)
        out["applied"].add(head.get("Preference-Applied"))
        if status != 201:
            continue
        token = body["token"]
        status, head, row = call("GET", url, user)
        out["get"].append(status)
        status, _head, _body = call(
            "PATCH",
            url,
            user,
            {"body": row["body"] + name},
            If_Match=head["ETag"],
            Occupy_Lease=token,
        )
        out["patch"].append(status)
        out["release"].append(call("DELETE", url + "lease/", user, Occupy_Lease=token)[0])
    out["applied"] = sorted(str(a) for a in out["applied"])
    return out
