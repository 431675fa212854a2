"""What a backend answers besides a lease: the :class:`~occupy.leases.Holder` of a claim
it read, and the errors for a key someone else holds (:func:`occupied`) or a
conditional takeover that found another holder (:func:`takeover_refused`)."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from occupy.exceptions import LockTimeout, Occupied, TakeoverRefused
from occupy.leases import Holder

__all__ = ["make_holder", "occupied", "takeover_refused", "utc"]


def utc(moment: datetime) -> datetime:
    """Return ``moment`` as an aware UTC ``datetime`` (a naive one is taken as UTC)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


def make_holder(
    owner: str, expires_at: datetime, fence: int, since: datetime | None = None
) -> Holder:
    """Return the :class:`~occupy.leases.Holder` for a claim read from the store."""
    return Holder(
        owner=owner,
        expires_at=utc(expires_at),
        fence=int(fence),
        since=None if since is None else utc(since),
    )


def takeover_refused(
    key: str, if_fence: int, holder: Holder | None, remaining: float | None
) -> TakeoverRefused:
    """Return the error for a conditional takeover of ``key`` that found another
    holder than the grant with fence ``if_fence``: ``holder`` (``None`` when the key
    is free), with ``remaining`` seconds left by the store's clock."""
    now = "free" if holder is None else f"held by {holder.owner!r} (fence {holder.fence})"
    return TakeoverRefused(
        f"{key!r} was not taken over: its holder changed since it was read (the grant "
        f"with fence {if_fence} no longer holds it; it is now {now}).",
        key=key,
        holder=holder,
        if_fence=if_fence,
        retry_after=(None if holder is None or remaining is None else max(1, math.ceil(remaining))),
    )


def occupied(
    key: str, holder: Holder | None, remaining: float | None, *, waited: float | None
) -> Occupied:
    """Return the error for ``key`` held by ``holder`` (``remaining`` seconds left by the
    store's clock, if known): ``LockTimeout`` after waiting ``waited`` seconds, else
    ``Occupied``."""
    retry_after = None if remaining is None else max(1, math.ceil(remaining))
    who = f" by {holder.owner!r}" if holder else ""
    if waited:
        return LockTimeout(
            f"{key!r} is still held{who} after waiting {waited:g} s; "
            "someone else is working on it, try again later.",
            key=key,
            holder=holder,
            retry_after=retry_after,
        )
    return Occupied(
        f"{key!r} is held{who}; someone else is working on it, try again later.",
        key=key,
        holder=holder,
        retry_after=retry_after,
    )
