"""Functions that run inside spawned worker processes (see tests/multiproc.py)."""

from __future__ import annotations

import time

import occupy


def database_of(using: str) -> str:
    """Return the database alias a database backend alias stores its claims in."""
    from django.conf import settings

    options = settings.OCCUPY["BACKENDS"][using].get("OPTIONS") or {}
    return options.get("DATABASE", "default")


def increment(using: str | None, key: str, rounds: int, hold: float,
              database: str = "default") -> list[tuple[float, float, int]]:
    """Add one to counter ``key`` ``rounds`` times by a slow read-modify-write, each inside
    the lock on ``key`` (no lock when ``using`` is ``None``); return the (entered, left,
    fence) of each critical section, by the machine-wide monotonic clock."""
    from tests.testapp.models import Counter

    counters = Counter.objects.using(database)
    sections = []
    for _ in range(rounds):
        guard = occupy.lock(key, using=using, ttl=30, timeout=120) if using else None
        lease = guard.__enter__() if guard else None
        entered = time.monotonic()
        value = counters.get(name=key).value
        time.sleep(hold)
        counters.filter(name=key).update(value=value + 1)
        left = time.monotonic()
        if guard:
            guard.__exit__(None, None, None)
        sections.append((entered, left, lease.fence if lease else 0))
    return sections


def try_acquire(using: str, key: str, owner: str) -> str:
    """Try ``key`` once without waiting; return ``"acquired"`` or ``"occupied"``."""
    try:
        occupy.release(occupy.acquire(key, owner=owner, timeout=0, using=using))
    except occupy.Occupied:
        return "occupied"
    return "acquired"


def hold_until_killed(using: str, key: str, ttl: float) -> None:
    """Take ``key`` and never release it; the parent kills this process."""
    occupy.acquire(key, owner="doomed", ttl=ttl, using=using)
    print("holding", flush=True)
    time.sleep(3600)
