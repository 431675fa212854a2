"""A backend whose claims are files under ``LOCATION``: :class:`FileStore`, the part of
:class:`~occupy.backends.file.FileBackend` that its attempts share with it (its
configuration, its :class:`~.directory.ClaimDirectory` and per-key locks, and the steps
on one key's files, each taken under the key's lock)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from django.core.checks import CheckMessage, Warning

from occupy.backends.base import BaseBackend
from occupy.backends.claims import UNKNOWN_OWNER, Entry, digest, from_us
from occupy.backends.file.directory import ClaimDirectory
from occupy.backends.file.keylocks import KeyLocks
from occupy.backends.file.records import DEAD
from occupy.backends.options import Option, where
from occupy.leases import Holder, Lease

__all__ = ["FileStore"]


class FileStore(BaseBackend):
    """Claims as files in a directory; see :class:`~occupy.backends.file.FileBackend`."""

    #: A ``LOCATION`` that cannot be used (under a regular file, not writable, a
    #: network filesystem gone) fails with one of these.
    store_errors = (OSError,)
    expires_by_itself = False

    requires_location = True
    options_schema = {
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

    @classmethod
    def config_problems(
        cls, alias: str, params: Mapping[str, Any], options: Mapping[str, Any]
    ) -> list[str]:
        """Add: ``LOCATION`` must be a path."""
        location = params.get("LOCATION")
        if location and not isinstance(location, str | os.PathLike):
            return [
                f"{where(alias)}['LOCATION'] must be the path of a directory, not {location!r}."
            ]
        return super().config_problems(alias, params, options)

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.W003`` (a relative ``LOCATION``) and ``occupy.W005`` (a
        ``LOCATION`` this process cannot write)."""
        messages = super().check(alias, params)
        location = params.get("LOCATION")
        if not location or not isinstance(location, str | os.PathLike):
            return messages
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

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        # A str or os.PathLike: config_problems refused anything else.
        self.root = os.path.abspath(os.fspath(params["LOCATION"]))
        self.poll_interval = float(self.options["POLL_INTERVAL"])
        self.pending_ttl = float(self.options["PENDING_TTL"])
        self.foreign_ttl = float(self.options["FOREIGN_TTL"])
        self.directory = ClaimDirectory(self.root)
        self.locks = KeyLocks(self.directory.locks_path)

    def using_path(self, key: str) -> str:
        """Return the path of ``key``'s granted claim."""
        return self.directory.using_path(digest(key))

    def close(self) -> None:
        """Close this process's lock files."""
        self.locks.close()

    # --- steps on one key, each under the key's lock -------------------------------------
    def _claim(self, d: str) -> Entry | None:
        """Return the key's claim, or ``None``; a file that is not a claim occupy wrote as
        a foreign one (see the module docstring)."""
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

    def _unwind(self, d: str, claim: Entry) -> None:
        """Undo one level of the key's claim; retire it on its last."""
        if claim.depth > 1:
            self.directory.rewrite(d, claim._replace(depth=claim.depth - 1))
        else:
            self.directory.retire(d)

    def _lease(self, key: str, ttl: float, entry: Entry) -> Lease:
        return self.make_lease(
            key,
            owner=entry.owner,
            token=entry.token,
            fence=entry.fence,
            expires_at=from_us(entry.expires_us),
            ttl=ttl,
            depth=entry.depth,
        )

    def _holder(self, claim: Entry) -> Holder:
        return self.make_holder(
            claim.owner, from_us(claim.expires_us), claim.fence, from_us(claim.since_us)
        )

    def describe_store(self) -> str:
        """Return the directory the claims are in."""
        return f"directory {self.root} (occupy backend {self.alias!r})"

    def store_fix(self) -> str:
        """Return what to check when the directory cannot be used."""
        return "check that it exists on a mounted file system and that this user may write it"
