"""A sweep of the claims whose expiry has passed, in windows of expiry (PostgreSQL).

Each batch deletes every expired claim whose expiry lies in a window ``[low, high)``:
one range of the expiry index, read as a bitmap, so the table's pages are visited once
each, in their order, as a bare ``DELETE`` visits them. A batch of ``ORDER BY
expires_at LIMIT n`` rows visits each row's page three times instead, in the random
order of expiry: once to find it, once to delete it, and once more when the next batch
steps over its dead index entry.

The probe finds the first expired claim and the ``batch_size + 1``-th, where the first
window ends; each next window is as wide as the last, scaled by how far the last's
count fell from ``batch_size`` (at most doubled), so a batch holds about ``batch_size``
claims while their density changes slowly (claims that share one expiry to the
microsecond always go together). After an empty window, or at the time the probe read,
the probe runs again from there; the sweep ends when it finds no claim expired. Each
window's ``DELETE`` also asks ``expires_at <= statement_timestamp()``: a live claim is
never in a batch, whatever the windows say, and a claim renewed while the batch waits
for it is kept. Windows never go back: a claim given, while the sweep runs, an expiry
already behind the windows (occupy writes none: every expiry it writes is the store's
now plus a ttl) waits for the next sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

__all__ = ["sweep_windows"]

#: The least width of a window: the resolution of PostgreSQL's ``timestamptz``.
TICK = timedelta(microseconds=1)
#: How much wider a window may be than the last one.
MOST_GROWTH = 2.0

Execute = Callable[[str, Sequence[Any]], tuple[int, list[Any]]]


def sweep_windows(
    execute: Execute,
    probe: str,
    window: str,
    batch_size: int,
    removed: Callable[[str], None] | None = None,
) -> int:
    """Delete every expired claim in windows of expiry of about ``batch_size`` claims;
    return how many; tell ``removed`` each key (``window`` then returns the keys).

    ``probe`` takes the least expiry to look from (twice; ``None``: from the start) and
    ``batch_size``; it returns the least expiry passed from there (``NULL``: none), the
    expiry ``batch_size`` claims past that (``NULL``: fewer), and the store's now.
    ``window`` takes a window's bounds.
    """
    total = 0
    low: datetime | None = None  # the probe's first look: from the start
    while True:
        first, past, until = execute(probe, [low, low, batch_size])[1][0]
        if first is None:
            return total
        # Half-open windows: the last ends just past the probe's now, which it includes.
        until += TICK
        low = first
        width = max(min(past or until, until) - first, TICK)
        while low < until:
            high = min(low + width, until)
            deleted, rows = execute(window, [low, high])
            if removed is not None:
                deleted = len(rows)
                for (key,) in rows:
                    removed(key)
            total += deleted
            if not deleted:  # a gap: the probe finds the next claim past it
                low = high
                break
            width = max((high - low) * min(MOST_GROWTH, batch_size / deleted), TICK)
            low = high
