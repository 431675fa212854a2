"""``FileBackend``: locks as files under ``LOCATION``, claims pending then using: a
claimant queues a pending claim, looks at the pending claims ahead of it first, then at
the key's granted claim in ``using/``, and moves in when both are clear. The files and
the system calls are :class:`~.directory.ClaimDirectory`'s; this module is the protocol.

- Each step on a key (grant, release, extend, expiry) is done under the key's
  ``flock`` (:mod:`.keylocks`), so its checks and writes are one step and two
  claimants never both see the key free. POSIX has no compare-and-delete: without
  the lock a late release could delete the next holder's claim. The kernel drops the
  lock if its process dies.
- Waiters queue as pending files named by ticket; the oldest live one is served
  first, and a newcomer is not granted while any live claim is pending (the pending
  check comes before the granted one), so ties never livelock and nobody starves.
- Every claim carries its expiry (written into the granted claim; a pending claim's
  expiry is its mtime, pushed forward by its waiter's heartbeat), and an expired claim
  counts as absent, so a crashed holder blocks its key for its ttl at most.

A file in ``using/`` that is not a claim occupy wrote (torn by a power cut, left by an
older version or another program) is held by an unknown holder
(:data:`~occupy.backends.claims.UNKNOWN_OWNER`, fence 0), never free: it expires
``FOREIGN_TTL`` after it was last written (its mtime), since nothing in it says when
its holder's lease ends. Then it counts as expired like any claim: the next grant
replaces it (its fence comes from the clock floor) and ``sweep_locks`` removes it.
``list_locks`` shows it under its path. A *directory* there (or in ``fences/``) is
another matter: no grant can replace it, so every call on its key, ``holder()``
included, raises :class:`~occupy.exceptions.StoreUnavailable` naming the path, and
nothing (a takeover, an expiry, ``sweep_locks``) moves it; ``occupy.W004`` names it.

Every time is this host's clock (there is no server clock): hosts sharing the
directory over a network filesystem must keep their clocks in step. The fence is
``max(last fence + 1, clock in µs)``, the last fence being read from ``fences/``, so it
rises across releases, expiry, sweeps and restarts. Nothing is fsynced: after a power
cut a key may have no holder, and fences fall back to the clock floor.

A ``LOCATION`` that cannot be used (under a regular file, not writable, a network
filesystem gone) fails every call with :class:`~occupy.exceptions.StoreUnavailable`.

OPTIONS: ``POLL_INTERVAL`` (longest pause between two tries of the first three in a
queue, default 0.05 s; every waiter but the head looks at its place without the key's
lock, paced by the queue: :meth:`~occupy.backends.attempt.Attempt.note_place`), ``PENDING_TTL``
(how long a waiter's queued claim outlives its last heartbeat, default 10 s),
``FOREIGN_TTL`` (how long an unreadable claim file holds its key after it was last
written, default 600 s). POSIX only (``fcntl``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from django.core.checks import CheckMessage, Warning

from occupy.backends.base import DEFAULT_SWEEP_BATCH, BaseBackend, Claim
from occupy.backends.claims import digest, from_us, now_us
from occupy.backends.file.attempt import FileAttempt
from occupy.backends.file.store import (
    OPTIONS,
    FileStore,
    holder_of,
    lease_of,
    location_problems,
    location_warnings,
)
from occupy.backends.options import where
from occupy.exceptions import OccupyError
from occupy.leases import Holder, Lease
from occupy.validation import MAX_FENCE

logger = logging.getLogger("occupy.backends.file")

__all__ = ["FileAttempt", "FileBackend"]

#: How long sweep keeps a key's fence file after its fence fell behind the clock (the
#: clock floor covers it from then on).
FENCE_MEMORY_US = 3600 * 1_000_000
#: How old a temporary file must be for sweep to remove it: a rewrite takes far less.
TMP_MEMORY_US = 60 * 1_000_000


class FileBackend(BaseBackend):
    """Locks stored as files in a directory (see the module docstring); the files are
    its :attr:`store`'s."""

    #: A ``LOCATION`` that cannot be used (under a regular file, not writable, a
    #: network filesystem gone) fails with one of these.
    store_errors = (OSError,)
    expires_by_itself = False
    requires_location = True
    options_schema = OPTIONS

    @classmethod
    def config_problems(
        cls, alias: str, params: Mapping[str, Any], options: Mapping[str, Any]
    ) -> list[str]:
        """Add: ``LOCATION`` must be a path."""
        return location_problems(alias, params) or super().config_problems(alias, params, options)

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.W003`` (a relative ``LOCATION``) and ``occupy.W005`` (a
        ``LOCATION`` this process cannot write)."""
        return super().check(alias, params) + location_warnings(alias, params)

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        # A str or os.PathLike: config_problems refused anything else.
        self.root = os.path.abspath(os.fspath(params["LOCATION"]))
        self.store = FileStore(self.root, self.options)
        # The store's parts, which the calls below use under each key's lock.
        self.locks = self.store.locks
        self.directory = self.store.directory

    def __repr__(self) -> str:
        return f"<FileBackend alias={self.alias!r} location={self.root!r}>"

    def using_path(self, key: str) -> str:
        """Return the path of ``key``'s granted claim."""
        return self.store.using_path(key)

    def close(self) -> None:
        """Close this process's lock files."""
        self.store.close()

    def describe_store(self) -> str:
        """Return the directory the claims are in."""
        return f"directory {self.root} (occupy backend {self.alias!r})"

    def store_fix(self) -> str:
        """Return what to check when the directory cannot be used."""
        return "check that it exists on a mounted file system and that this user may write it"

    # --- the contract -------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> FileAttempt:
        """Return an attempt to take ``key`` (see :class:`FileAttempt`)."""
        return FileAttempt(self, self.store, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Retire the lease's claim (or undo one level of it); never another's claim."""
        d = digest(lease.key)
        lost = None
        with self.reaching(lease.key), self.locks.hold(d):
            claim = self.store.claim(d)
            if claim is None or claim.token != lease.token:
                lost = "it expired or was taken over before release"
            elif not claim.live(now_us()):
                self.directory.retire(d)
                lost = "it expired before release"
            else:
                self.store.unwind(d, claim)
        if lost:  # outside the key's lock: lease_lost receivers may lock keys themselves
            raise lease.mark_lost(lost)

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after this host's now."""
        d = digest(lease.key)
        extended = None
        with self.reaching(lease.key), self.locks.hold(d):
            claim = self.store.claim(d)
            now = now_us()
            if claim is not None and claim.token == lease.token and claim.live(now):
                extended = claim._replace(expires_us=now + round(ttl * 1e6))
                self.directory.rewrite(d, extended)
        if extended is None:  # outside the key's lock, as in release
            raise lease.mark_lost("it expired or was taken over before it was extended")
        lease.expires_at = from_us(extended.expires_us)

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``."""
        d = digest(key)
        with self.reaching(key), self.locks.hold(d):
            claim = self.store.claim(d)
            now = now_us()
            if claim is None or claim.token != token or not claim.live(now):
                return None
            claim = claim._replace(
                depth=claim.depth + int(deeper),
                expires_us=max(claim.expires_us, now + round(ttl * 1e6)),
            )
            self.directory.rewrite(d, claim)
        return lease_of(self, key, ttl, claim)

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it (only the
        live claim with fence ``if_fence``, if given), under the key's lock: the claim
        is retired, its fence kept, and a new one granted; return the lease and the
        holder replaced."""
        d = digest(key)
        attempt = self.attempt(key, owner, ttl)
        with self.reaching(key), self.locks.hold(d):
            now = now_us()
            claim = self.store.claim(d)
            live = claim if claim is not None and claim.live(now) else None
            previous = None if live is None else holder_of(live)
            if if_fence is not None and (live is None or live.fence != if_fence):
                raise self.takeover_refused(
                    key, if_fence, previous, None if live is None else (live.expires_us - now) / 1e6
                )
            if claim is not None:
                if claim.fence >= MAX_FENCE:  # refused before the holder is touched
                    attempt._fence_exhausted(claim.fence, f"using/{d}")
                self.directory.retire(d)
            lease = attempt._grant(now)
        if lease is None:  # only if flock is not shared on this filesystem
            raise OccupyError(
                f"{key!r} could not be taken over: another process wrote its "
                "claim at the same moment (is flock shared here?).",
                key=key,
            )
        return lease, previous

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` (owner, expiry, fence; never the token), or ``None``."""
        d = digest(key)
        with self.reaching(key), self.locks.hold(d):
            claim = self.store.claim(d)
            if claim is None:  # free, unless its fence file cannot be written
                self.directory.check_fence_file(d)
        if claim is None or not claim.live(now_us()):
            return None
        return holder_of(claim)

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds an unexpired claim."""
        d = digest(lease.key)
        with self.reaching(lease.key), self.locks.hold(d):
            claim = self.store.claim(d)
        return claim is not None and claim.token == lease.token and claim.live(now_us())

    def sweep(
        self,
        *,
        batch_size: int = DEFAULT_SWEEP_BATCH,
        dry_run: bool = False,
        removed: Callable[[str], None] | None = None,
    ) -> int:
        """Remove expired claims and return how many (or would be, if ``dry_run``).

        Directories are streamed (``os.scandir``), so memory stays flat whatever their
        size; ``batch_size`` is accepted for the contract. Each claim is checked again
        under its key's lock, so a claim renewed meanwhile is kept. Fence files whose
        fence fell an hour behind the clock (the clock floor covers them) and stray
        temporary files go too, uncounted.
        """
        with self.reaching(None):
            self.directory.make()  # an unusable LOCATION fails here, even when empty
            return self._sweep(now_us(), dry_run, removed or (lambda key: None))

    def _sweep(self, now: int, dry_run: bool, removed: Callable[[str], None]) -> int:
        count = 0
        directory = self.directory
        strays: list[str] = []
        for d in directory.granted(strays):
            with self.locks.hold(d):
                claim = self.store.claim(d)
                if claim is not None and not claim.live(now):
                    count += 1
                    removed(claim.key)
                    if not dry_run:
                        directory.retire(d)
        for d in directory.queued(strays):
            with self.locks.hold(d):
                for ticket in directory.tickets(d, strays):
                    if directory.ticket_expires_ns(d, ticket) <= now * 1000:
                        count += 1
                        queued = directory.read_ticket(d, ticket)
                        if queued is not None:
                            removed(queued.key)
                        if not dry_run:
                            directory.remove_ticket(d, ticket)
                if not dry_run:
                    directory.remove_queue(d)
        if dry_run:
            self._report(strays)
            return count
        for d in directory.fenced(strays):
            with self.locks.hold(d):
                if directory.last_fence(d) < now - FENCE_MEMORY_US:
                    directory.forget_fence(d)
        directory.remove_temporaries((now - TMP_MEMORY_US) * 1000)
        self._report(strays)
        return count

    def claims(self) -> Iterable[Claim]:
        """Return every live claim, granted and queued, ordered by key."""
        with self.reaching(None):
            self.directory.make()  # an unusable LOCATION fails here, even when empty
            return self._claims(now_us())

    def _claims(self, now: int) -> list[Claim]:
        found = []
        directory = self.directory
        strays: list[str] = []
        for d in directory.granted(strays):
            with self.locks.hold(d):
                claim = self.store.claim(d)
            if claim is not None and claim.live(now):
                foreign = not claim.token
                found.append(
                    Claim(
                        claim.key,
                        claim.owner,
                        "using",
                        None if foreign else from_us(claim.since_us),
                        from_us(claim.expires_us),
                        None if foreign else claim.fence,
                    )
                )
        for d in directory.queued(strays):
            with self.locks.hold(d):
                for ticket in directory.tickets(d, strays):
                    expires = directory.ticket_expires_ns(d, ticket)
                    queued = directory.read_ticket(d, ticket)
                    # Gone, expired, or not a queued claim occupy wrote (it expires).
                    if queued is None or expires <= now * 1000:
                        continue
                    found.append(
                        Claim(
                            queued.key,
                            queued.owner,
                            "pending",
                            from_us(queued.since_us),
                            from_us(expires // 1000),
                            None,
                        )
                    )
        found.sort(key=lambda c: (c.key, c.state != "using"))
        self._report(strays)
        return found

    def _report(self, strays: list[str]) -> None:
        if strays:
            logger.warning(
                "occupy backend %r skipped %d entries of its LOCATION that are "
                "not occupy's (remove them): %s",
                self.alias,
                len(strays),
                ", ".join(repr(path) for path in strays[:5]),
            )

    def strays(self) -> list[str]:
        """Return the paths of the entries under ``LOCATION``'s ``using/``, ``pending/``
        and ``fences/`` that occupy did not write there (a file of another name, a
        directory where a claim file belongs): every call skips them."""
        strays: list[str] = []
        with self.reaching(None):
            directory = self.directory
            for d in directory.queued(strays):
                directory.tickets(d, strays)
            for _ in (*directory.granted(strays), *directory.fenced(strays)):
                pass
        return strays

    def check_store(self, databases: Collection[str]) -> list[CheckMessage]:
        """Add ``occupy.W004`` for entries of ``LOCATION`` occupy did not write."""
        messages = super().check_store(databases)
        try:
            strays = self.strays()
        except OccupyError:
            return messages  # an unusable LOCATION: W005 and the calls themselves say so
        if strays:
            shown = ", ".join(repr(path) for path in strays[:3])
            more = f" and {len(strays) - 3} more" if len(strays) > 3 else ""
            messages.append(
                Warning(
                    f"occupy backend {self.alias!r} has {len(strays)} entries in its LOCATION "
                    f"that occupy did not write: {shown}{more}. They are skipped, but a "
                    "directory where a key's claim or fence file belongs (using/<digest>, "
                    "fences/<digest>) makes every call on that key fail until it is removed.",
                    hint="Remove them: only occupy's claim files belong under using/, "
                    "pending/ and fences/ (give other files a directory of their own).",
                    obj=where(self.alias),
                    id="occupy.W004",
                )
            )
        return messages
