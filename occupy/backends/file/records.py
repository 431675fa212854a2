"""The bytes of the file backend's two records: a granted claim (the files in ``using/``
and ``fences/``) and a queued claim (the files in ``pending/<digest>/``).

Fields are separated by NUL, which keys and owners cannot contain
(:mod:`occupy.validation`). A record that does not parse is never an error: a granted
claim reads as :data:`DEAD`, a queued one as ``None``, and the backend decides what
such a file means.
"""

from __future__ import annotations

from typing import NamedTuple

from occupy.backends.claims import Entry
from occupy.validation import MAX_FENCE

__all__ = ["DEAD", "MAX_SIZE", "Queued", "dump_claim", "dump_queued", "load_claim", "load_queued"]

#: The most bytes a record is read with; claims are far smaller.
MAX_SIZE = 65536
_MAGIC = "occupy-claim-1"
#: Ends every granted claim: a claim rewritten in place by a shorter one keeps a stale
#: tail, which parsing stops before.
_END = "end"
#: What :func:`load_claim` returns for bytes that are not a claim: fence 0 (the clock
#: floor decides the next).
DEAD = Entry("", "", 0, 0, 0, 0, "")


def dump_claim(entry: Entry) -> bytes:
    """Return the bytes of a claim file holding ``entry``."""
    return "\0".join(
        (
            _MAGIC,
            entry.token,
            str(entry.fence),
            str(entry.depth),
            str(entry.expires_us),
            str(entry.since_us),
            entry.owner,
            entry.key,
            _END,
            "",
        )
    ).encode("utf-8")


def load_claim(data: bytes) -> Entry:
    """Return the entry in a claim file's bytes (:data:`DEAD` if they are not one)."""
    fields = data.decode("utf-8", "replace").split("\0", 9)
    if len(fields) < 9 or fields[0] != _MAGIC or fields[8] != _END:
        return DEAD  # torn by a power cut, or not ours
    _, token, fence, depth, expires, since, owner, key = fields[:8]
    try:
        entry = Entry(token, owner, int(fence), int(depth), int(expires), int(since), key)
    except ValueError:
        return DEAD
    # A fence no BIGINT holds is not one occupy wrote either.
    return entry if 0 <= entry.fence <= MAX_FENCE else DEAD


class Queued(NamedTuple):
    """A queued claim: who waits for ``key``, since when (µs). Its expiry is its file's
    mtime, which its waiter's heartbeat pushes forward, so it is not in the record."""

    owner: str
    key: str
    since_us: int


def dump_queued(queued: Queued) -> bytes:
    """Return the bytes of a pending file holding ``queued``."""
    return "\0".join((queued.owner, queued.key, str(queued.since_us))).encode("utf-8")


def load_queued(data: bytes) -> Queued | None:
    """Return the queued claim in a pending file's bytes, or ``None`` if they are not one."""
    try:
        owner, key, since = data.decode("utf-8").split("\0")
        return Queued(owner, key, int(since))
    except ValueError:  # UnicodeDecodeError is one
        return None
