"""The claim files under ``LOCATION``: :class:`FileStore`, what
:class:`~occupy.backends.file.FileBackend` and its attempts share (the
:class:`~.directory.ClaimDirectory`, per-key locks, and the steps on one key's files,
each taken under the key's lock), held by the backend rather than inherited; and the
backend's options and the checks of its ``LOCATION``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from django.core.checks import CheckMessage, Warning

from occupy.backends.attempt import AttemptBackend
from occupy.backends.claims import UNKNOWN_OWNER, Entry, digest, from_us
from occupy.backends.file.directory import ClaimDirectory
from occupy.backends.file.keylocks import KeyLocks
from occupy.backends.file.records import DEAD
from occupy.backends.options import Option, where
from occupy.backends.outcomes import make_holder
from occupy.leases import Holder, Lease

__all__ = ["OPTIONS", "FileStore", "holder_of", "lease_of", "location_problems"]

#: The file backend's ``OPTIONS``.
OPTIONS = {
    "POLL_INTERVAL": Option(
        float, 0.05, "longest pause between two tries near the head of a queue", positive=True
    ),
    "PENDING_TTL": Option(
        float, 10, "how long a waiter's queued claim outlives its last heartbeat", positive=True
    ),
    "FOREIGN_TTL": Option(
        float, 600, "how long a claim file occupy cannot read counts as held", positive=True
    ),
}


class FileStore:
    """Claims as files in the directory ``root``; see
    :class:`~occupy.backends.file.FileBackend`. ``options`` are the backend's, checked."""

    def __init__(self, root: str, options: Mapping[str, Any]) -> None:
        self.root = root
        self.poll_interval = float(options["POLL_INTERVAL"])
        self.pending_ttl = float(options["PENDING_TTL"])
        self.foreign_ttl = float(options["FOREIGN_TTL"])
        self.directory = ClaimDirectory(root)
        self.locks = KeyLocks(self.directory.locks_path)

    def using_path(self, key: str) -> str:
        """Return the path of ``key``'s granted claim."""
        return self.directory.using_path(digest(key))

    def close(self) -> None:
        """Close this process's lock files."""
        self.locks.close()

    # --- steps on one key, each under the key's lock -------------------------------------
    def claim(self, d: str) -> Entry | None:
        """Return the claim of the key whose digest is ``d``, or ``None``; a file that is
        not a claim occupy wrote as a foreign one (see the backend's module docstring)."""
        entry = self.directory.claim(d)
        if entry is not DEAD:
            return entry
        written = self.directory.written_us(d)
        if written is None:
            return None
        # The token is empty, which no lease has: nobody can release or extend it.
        return Entry(
            "",
            UNKNOWN_OWNER,
            0,
            1,
            written + round(self.foreign_ttl * 1e6),
            written,
            self.directory.using_path(d),
        )

    def unwind(self, d: str, claim: Entry) -> None:
        """Undo one level of the key's claim; retire it on its last."""
        if claim.depth > 1:
            self.directory.rewrite(d, claim._replace(depth=claim.depth - 1))
        else:
            self.directory.retire(d)


def lease_of(backend: AttemptBackend, key: str, ttl: float, entry: Entry) -> Lease:
    """Return the lease ``backend`` grants by the claim ``entry`` on ``key``."""
    return backend.make_lease(
        key,
        owner=entry.owner,
        token=entry.token,
        fence=entry.fence,
        expires_at=from_us(entry.expires_us),
        ttl=ttl,
        depth=entry.depth,
    )


def holder_of(claim: Entry) -> Holder:
    """Return the holder of ``claim`` (owner, expiry, fence; never the token)."""
    return make_holder(claim.owner, from_us(claim.expires_us), claim.fence, from_us(claim.since_us))


def location_problems(alias: str, params: Mapping[str, Any]) -> list[str]:
    """Return what makes ``LOCATION`` unusable as a path, if anything."""
    location = params.get("LOCATION")
    if location and not isinstance(location, str | os.PathLike):
        return [f"{where(alias)}['LOCATION'] must be the path of a directory, not {location!r}."]
    return []


def location_warnings(alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
    """Return ``occupy.W003`` (a relative ``LOCATION``) and ``occupy.W005`` (a
    ``LOCATION`` this process cannot write), where they apply."""
    location = params.get("LOCATION")
    if not location or not isinstance(location, str | os.PathLike):
        return []
    messages: list[CheckMessage] = []
    location = os.fspath(location)
    if not os.path.isabs(location):
        messages.append(
            Warning(
                f"occupy backend {alias!r} has the relative LOCATION {location!r}: "
                "processes started in different directories would not see each other's "
                "locks.",
                hint=f"Use an absolute path, e.g. {os.path.abspath(location)!r}.",
                obj=where(alias),
                id="occupy.W003",
            )
        )
    existing = os.path.abspath(location)  # the directory, or its nearest ancestor
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    if not (os.path.isdir(existing) and os.access(existing, os.W_OK | os.X_OK)):
        messages.append(
            Warning(
                f"occupy backend {alias!r} cannot write its LOCATION {location!r} "
                f"({existing!r} is not a directory this process can write).",
                hint="Create the directory and let the site's user write it.",
                obj=where(alias),
                id="occupy.W005",
            )
        )
    return messages
