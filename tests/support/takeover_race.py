"""Workers for the conditional takeover race: user A takes and renews a key, user B
takes over only the grants it read as its own (``if_fence``). They run in spawned
processes (tests/support/multiproc.py), so they live at module level."""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

__all__ = ["OWNER_A", "OWNER_B", "hold_and_renew", "race_worker", "take_over_own"]

OWNER_A = "user:a"
OWNER_B = "user:b"


def hold_and_renew(alias: str, key: str, seconds: float, rounds: int) -> dict[str, Any]:
    """As user A, take ``key`` (waiting for it), renew it twice and release it, for
    ``seconds`` or ``rounds`` grants; return the fences granted and those lost."""
    import occupy

    granted: list[int] = []
    lost: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(granted) < rounds:
        try:
            lease = occupy.acquire(key, owner=OWNER_A, ttl=10, timeout=1, backend=alias)
        except (occupy.LockTimeout, occupy.StoreUnavailable):
            continue  # a busy store (SQLite's write lock under load): try again
        granted.append(lease.fence)
        try:
            for _ in range(2):
                time.sleep(random.uniform(0, 0.002))
                lease.extend(10)
            occupy.release(lease)
        except occupy.LeaseLost:
            lost.append(lease.fence)
        except occupy.StoreUnavailable:
            pass  # the lease expires by its ttl
        time.sleep(random.uniform(0, 0.004))  # let B in now and then
    return {"granted": granted, "lost": lost}


def take_over_own(alias: str, key: str, seconds: float, rounds: int) -> dict[str, Any]:
    """As user B, for ``seconds`` or ``rounds`` loops: read the holder; take the key if
    it is free, take it over with ``if_fence`` if the holder read is B's own, and give
    it back after a moment. Return the holders each takeover replaced (as the store
    reported them through ``lease_taken_over``) and who held the key at each refusal."""
    import occupy
    from occupy import signals

    replaced: list[tuple[str, int]] = []
    refused: dict[str, int] = {}

    def receiver(
        sender: type, lease: occupy.Lease, previous: occupy.Holder | None, **kwargs: object
    ) -> None:
        replaced.append(("(free)", 0) if previous is None else (previous.owner, previous.fence))

    signals.lease_taken_over.connect(receiver, weak=False)
    deadline = time.monotonic() + seconds
    for _ in range(rounds):
        if time.monotonic() >= deadline:
            break
        read = occupy.holder(key, backend=alias)
        try:
            if read is None:
                lease = occupy.acquire(
                    key, owner=OWNER_B, ttl=0.5, timeout=0, reentrant=False, backend=alias
                )
            elif read.owner == OWNER_B:
                # Deciding the permission takes a moment (a request's queries), in
                # which the holder read may release and A take the key.
                time.sleep(random.uniform(0, 0.002))
                lease = occupy.takeover(
                    key, owner=OWNER_B, ttl=0.5, if_fence=read.fence, reentrant=False, backend=alias
                )
            else:
                time.sleep(0.001)
                continue
        except occupy.TakeoverRefused as e:
            holder = "(free)" if e.holder is None else e.holder.owner
            refused[holder] = refused.get(holder, 0) + 1
            continue
        except (occupy.Occupied, occupy.StoreUnavailable):
            continue
        time.sleep(random.uniform(0, 0.003))
        # LeaseLost: the other B took it over meanwhile, or it expired.
        with contextlib.suppress(occupy.LeaseLost, occupy.StoreUnavailable):
            occupy.release(lease)
    return {"replaced": replaced, "refused": refused}


def race_worker(role: str, alias: str, key: str, seconds: float) -> dict[str, Any]:
    """Run user A's loop (``role="a"``) or user B's (``"b"``), bounded in time and count."""
    if role == "a":
        return hold_and_renew(alias, key, seconds, rounds=2000)
    return take_over_own(alias, key, seconds, rounds=20000)
