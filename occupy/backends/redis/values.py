"""What the Redis lock protocol's keys hold and its scripts reply, read on the Python
side: a holder's value (:class:`Held`), a waiter's entry, the server's times."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from redis.exceptions import ResponseError

from occupy.backends.base import Claim
from occupy.backends.claims import UNKNOWN_OWNER
from occupy.leases import Holder

__all__ = [
    "Held",
    "read_held",
    "server_ms",
    "text",
    "to_datetime",
    "to_ms",
    "waiting_claims",
    "wrong_type",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The expiry shown for a foreign value that Redis never expires: 9999-12-31, in ms.
_NEVER_MS = 253402300799000


def text(value: Any) -> str:
    """Return a Redis reply as ``str``: decoded bytes, or the value's own text."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def to_datetime(ms: Any) -> datetime:
    """Return a server time in milliseconds as an aware UTC datetime."""
    return _EPOCH + timedelta(0, 0, 0, int(ms))


def to_ms(ttl: float, name: str = "ttl") -> int:
    """Return positive, finite seconds as whole milliseconds (at least one), else raise."""
    if not (isinstance(ttl, int | float) and math.isfinite(ttl) and ttl > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, not {ttl!r}.")
    return max(1, math.ceil(ttl * 1000))


class Held(NamedTuple):
    """A holder's value under a lock's ``lock`` key, without its token."""

    owner: str
    fence: int
    expires: int
    since: int
    key: str
    #: Whether the value is one occupy did not write (see :meth:`unknown`).
    foreign: bool = False

    @classmethod
    def parse(cls, value: Any, *, with_token: bool = True) -> Held:
        """Parse ``"[<token> ]<flag><depth> <fence> <expires> <since> <owner>\\0<key>"``;
        ``ValueError`` if ``value`` is not one (occupy did not write it)."""
        try:
            found = text(value)
            if with_token:
                found = found.split(" ", 1)[1]
            _depth, fence, expires, since, tail = found.split(" ", 4)
            owner, key = tail.split("\0", 1)
            return cls(owner, int(fence), int(expires), int(since), key)
        except (ValueError, IndexError) as e:  # UnicodeDecodeError is a ValueError
            raise ValueError(f"not a value occupy wrote: {value!r:.100}") from e

    @classmethod
    def unknown(cls, key: str, now_ms: int, pttl: int) -> Held:
        """Return a value occupy did not write as held by :data:`UNKNOWN_OWNER` (fence
        0) until Redis expires it: ``pttl`` ms after ``now_ms``, or never (``-1``)."""
        expires = _NEVER_MS if pttl == -1 else now_ms + max(pttl, 0)
        return cls(UNKNOWN_OWNER, 0, expires, 0, key, foreign=True)

    def holder(self) -> Holder:
        """Return the public view: owner, expiry, fence, grant time."""
        return Holder(self.owner, to_datetime(self.expires), self.fence, to_datetime(self.since))

    def claim(self, name: Any) -> Claim:
        """Return the ``list_locks`` row of this holder, found under Redis key ``name``
        (a value occupy did not write is listed under that name: its lock key cannot
        be known)."""
        if self.foreign:
            return Claim(text(name), UNKNOWN_OWNER, "using", None, to_datetime(self.expires), None)
        return Claim(
            self.key,
            self.owner,
            "using",
            to_datetime(self.since),
            to_datetime(self.expires),
            self.fence,
        )


def wrong_type(error: ResponseError) -> bool:
    """Return whether ``error`` is Redis's ``WRONGTYPE``: another type under the name."""
    return str(error).startswith("WRONGTYPE")


def read_held(client: Any, name: Any, key: str | None) -> Held | None:
    """Return the holder of lock key ``name`` (Redis's name; ``key``, the lock key, if
    known), one occupy did not write as :meth:`Held.unknown`, or ``None`` if free."""
    try:
        value = client.get(name)
    except ResponseError as e:
        if not wrong_type(e):
            raise
        value = b""  # another type: not ours
    if value is None:
        return None
    try:
        return Held.parse(value)
    except ValueError:
        return Held.unknown(
            key if key is not None else text(name), server_ms(client), int(client.pttl(name))
        )


def waiting_claims(client: Any, waiters: str, now_ms: int) -> list[Claim]:
    """Return the live waiters in hash ``waiters`` as ``pending`` claims."""
    try:
        entries = {text(k): text(v) for k, v in client.hgetall(waiters).items()}
        arrivals = dict(
            client.zrange(waiters.removesuffix("waiters") + "queue", 0, -1, withscores=True)
        )
    except ResponseError as e:  # another type under the name: no waiters of ours
        if not wrong_type(e):
            raise
        return []
    claims = []
    for token, info in entries.items():
        try:
            deadline, _ttl, tail = info.split("|", 2)
            owner, key = tail.split("\0", 1)
            int(deadline)
        except ValueError:
            continue  # not a waiter occupy wrote; it expires with the hash (QUEUE_TTL)
        arrival = arrivals.get(token.encode()) or arrivals.get(token)
        if int(deadline) > now_ms and arrival is not None:
            claims.append(
                Claim(
                    key, owner, "pending", to_datetime(arrival // 1000), to_datetime(deadline), None
                )
            )
    return claims


def server_ms(client: Any) -> int:
    """Return the server's clock (``TIME``) in milliseconds."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000
