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
``list_locks`` shows it under its path.

Every time is this host's clock (there is no server clock): hosts sharing the
directory over a network filesystem must keep their clocks in step. The fence is
``max(last fence + 1, clock in µs)``, the last fence being read from ``fences/``, so it
rises across releases, expiry, sweeps and restarts. Nothing is fsynced: after a power
cut a key may have no holder, and fences fall back to the clock floor.

A ``LOCATION`` that cannot be used (under a regular file, not writable, a network
filesystem gone) fails every call with :class:`~occupy.exceptions.StoreUnavailable`.

OPTIONS: ``POLL_INTERVAL`` (longest pause between two tries of the first three in a
queue, default 0.05 s; every waiter but the head looks at its place without the key's
lock, paced by the queue: :meth:`~occupy.backends.base.Attempt.note_place`), ``PENDING_TTL``
(how long a waiter's queued claim outlives its last heartbeat, default 10 s),
``FOREIGN_TTL`` (how long an unreadable claim file holds its key after it was last
written, default 600 s). POSIX only (``fcntl``).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NoReturn

from django.core.checks import CheckMessage, Warning

from occupy.backends.base import Attempt, BaseBackend, Claim
from occupy.backends.claims import UNKNOWN_OWNER, Entry, digest, from_us, now_us
from occupy.backends.file.directory import ClaimDirectory
from occupy.backends.file.keylocks import KeyLocks
from occupy.backends.file.records import DEAD, Queued
from occupy.backends.options import Option, where
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
    """Locks stored as files in a directory (see the module docstring)."""

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

    def __repr__(self) -> str:
        return f"<FileBackend alias={self.alias!r} location={self.root!r}>"

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

    # --- the contract -------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> FileAttempt:
        """Return an attempt to take ``key`` (see :class:`FileAttempt`)."""
        return FileAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Retire the lease's claim (or undo one level of it); never another's claim."""
        d = digest(lease.key)
        lost = None
        with self.reaching(lease.key), self.locks.hold(d):
            claim = self._claim(d)
            if claim is None or claim.token != lease.token:
                lost = "it expired or was taken over before release"
            elif not claim.live(now_us()):
                self.directory.retire(d)
                lost = "it expired before release"
            else:
                self._unwind(d, claim)
        if lost:  # outside the key's lock: lease_lost receivers may lock keys themselves
            raise lease.mark_lost(lost)

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after this host's now."""
        d = digest(lease.key)
        extended = None
        with self.reaching(lease.key), self.locks.hold(d):
            claim = self._claim(d)
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
            claim = self._claim(d)
            now = now_us()
            if claim is None or claim.token != token or not claim.live(now):
                return None
            claim = claim._replace(
                depth=claim.depth + int(deeper),
                expires_us=max(claim.expires_us, now + round(ttl * 1e6)),
            )
            self.directory.rewrite(d, claim)
        return self._lease(key, ttl, claim)

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it (only the
        live claim with fence ``if_fence``, if given), under the key's lock: the claim
        is retired, its fence kept, and a new one granted; return the lease and the
        holder replaced."""
        d = digest(key)
        attempt = FileAttempt(self, key, owner, ttl)
        with self.reaching(key), self.locks.hold(d):
            now = now_us()
            claim = self._claim(d)
            live = claim if claim is not None and claim.live(now) else None
            previous = None if live is None else self._holder(live)
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
            claim = self._claim(d)
        if claim is None or not claim.live(now_us()):
            return None
        return self._holder(claim)

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds an unexpired claim."""
        d = digest(lease.key)
        with self.reaching(lease.key), self.locks.hold(d):
            claim = self._claim(d)
        return claim is not None and claim.token == lease.token and claim.live(now_us())

    def sweep(
        self,
        *,
        batch_size: int = 1000,
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

    def describe_store(self) -> str:
        """Return the directory the claims are in."""
        return f"directory {self.root} (occupy backend {self.alias!r})"

    def store_fix(self) -> str:
        """Return what to check when the directory cannot be used."""
        return "check that it exists on a mounted file system and that this user may write it"

    def _sweep(self, now: int, dry_run: bool, removed: Callable[[str], None]) -> int:
        count = 0
        directory = self.directory
        strays: list[str] = []
        for d in directory.granted(strays):
            with self.locks.hold(d):
                claim = self._claim(d)
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
                claim = self._claim(d)
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
                    f"that occupy did not write: {shown}{more}. They are skipped.",
                    hint="Remove them: only occupy's claim files belong under using/, "
                    "pending/ and fences/ (give other files a directory of their own).",
                    obj=where(self.alias),
                    id="occupy.W004",
                )
            )
        return messages


class FileAttempt(Attempt):
    """One try at a key: the fast path, then a pending claim that waits its turn."""

    def __init__(self, backend: FileBackend, key: str, owner: str, ttl: float) -> None:
        super().__init__(backend, key, owner, ttl)
        self.backend: FileBackend = backend
        self.directory = backend.directory
        self.max_delay = backend.poll_interval
        # A queued claim is heartbeated by the tries: pause well within its ttl.
        self.longest_queued_pause = min(self.longest_queued_pause, backend.pending_ttl / 4)
        self.digest = digest(key)
        self.ticket: str | None = None  # our pending file's name, once queued
        self.beat_at = 0.0
        self.seen: Entry | None = None
        #: Whether a try may have granted the key without returning its lease (it
        #: failed after taking the key's lock): :meth:`cancel` must then look.
        self.in_doubt = False

    def try_acquire(self) -> Lease | None:
        """Grant the key if no live claim is ahead of us and none is using it; else
        return ``None``."""
        if self.ahead and self._behind():
            return None
        with self.backend.reaching(self.key), self.backend.locks.hold(self.digest):
            self.in_doubt = True
            lease = self._try(now_us())
        self.in_doubt = False
        return lease

    def _try(self, now: int) -> Lease | None:
        # Pending claims first, then the granted one: under the key's lock both reads
        # are one step, and the order decides who is served.
        ahead = self._pending_ahead(now)
        claim = self.backend._claim(self.digest)
        self.seen = claim
        if claim is not None and claim.live(now):
            self._heartbeat()  # held, whoever by: owners do not re-enter (occupy.reentry)
            return None
        if ahead:
            self._heartbeat()
            return None
        if claim is not None:
            self.directory.retire(self.digest)  # expired: its fence goes to fences/
        return self._grant(now)

    def _behind(self) -> bool:
        """Return whether our queued claim is still behind a live one, read without the
        key's lock (a waiter behind others leaves the lock to the head and the holder);
        heartbeat it if so. Anything else (our claim gone, the first claim expired) is
        left to a locked try, which re-queues or clears it."""
        with self.backend.reaching(self.key):
            tickets = self.directory.tickets(self.digest)
            if self.ticket not in tickets[1:]:
                return False
            if self.directory.ticket_expires_ns(self.digest, tickets[0]) <= time.time_ns():
                return False
            self.note_place(tickets.index(self.ticket))
            self._heartbeat()
        return True

    def _pending_ahead(self, now: int) -> bool:
        """Return whether a live pending claim is ahead of ours (of any, if we are not
        queued); remove the expired ones passed on the way."""
        tickets = self.directory.tickets(self.digest)
        if self.ticket is not None and self.ticket not in tickets:
            # Our claim expired while we stalled and was removed: queue again, last.
            self._enqueue(tickets)
            tickets = self.directory.tickets(self.digest)
        for place, ticket in enumerate(tickets):
            if ticket == self.ticket:
                self.note_place(0)
                return False
            if self.directory.ticket_expires_ns(self.digest, ticket) > now * 1000:
                if self.ticket in tickets:
                    self.note_place(tickets.index(self.ticket) - place)
                return True
            self.directory.remove_ticket(self.digest, ticket)
        return False

    def _grant(self, now: int) -> Lease | None:
        """Write our claim into ``using/`` (no claim is there: we checked, under the
        lock), with a fence above the key's last; ``None`` if a claim file appeared."""
        expires = now + round(self.ttl * 1e6)

        def claim(last_fence: int) -> Entry:
            if last_fence >= MAX_FENCE:
                self._fence_exhausted(last_fence, f"fences/{self.digest}")
            return Entry(
                self.token, self.owner, max(last_fence + 1, now), 1, expires, now, self.key
            )

        entry = self.directory.grant(self.digest, claim)
        if entry is None:  # only if flock is not shared on this filesystem
            return None
        self._dequeue()
        return self.backend._lease(self.key, self.ttl, entry)

    def enqueue(self) -> None:
        """Write the pending claim that holds this caller's place in the queue."""
        with self.backend.reaching(self.key), self.backend.locks.hold(self.digest):
            self._enqueue(self.directory.tickets(self.digest))

    def _enqueue(self, tickets: list[str]) -> None:
        # Tickets rise under the key's lock: after the newest queued one, and the clock.
        last = max(
            (
                int(ticket.split("-", 1)[0])
                for ticket in tickets
                if ticket.split("-", 1)[0].isdigit()
            ),
            default=0,
        )
        ticket = f"{max(time.time_ns(), last + 1):020d}-{secrets.token_hex(4)}"
        self.directory.enqueue(self.digest, ticket, Queued(self.owner, self.key, now_us()))
        self.ticket = ticket
        self.note_place(None)
        self._heartbeat(force=True)

    def _fence_exhausted(self, fence: int, path: str) -> NoReturn:
        raise self.backend.unavailable(
            self.key,
            OverflowError(
                f"{path} records fence {fence}, the largest a fence can be (2^63 - 1), so no "
                f"higher one exists: delete {path} by hand; fences then restart from the "
                "clock, below those handed out, so storage that compares them must forget them"
            ),
        )

    def _heartbeat(self, force: bool = False) -> None:
        """Push our pending claim's expiry (its mtime) ``PENDING_TTL`` past now."""
        pending_ttl = self.backend.pending_ttl
        if self.ticket is None or (not force and time.monotonic() - self.beat_at < pending_ttl / 3):
            return
        # Removed as expired meanwhile: it stays removed, and the next try queues again.
        self.directory.renew_ticket(
            self.digest, self.ticket, time.time_ns() + round(pending_ttl * 1e9)
        )
        self.beat_at = time.monotonic()

    def _dequeue(self) -> None:
        if self.ticket is not None:
            self.directory.dequeue(self.digest, self.ticket)
            self.ticket = None

    def cancel(self) -> None:
        """Remove our pending claim, and a grant we may have made without hearing of it."""
        if self.ticket is None and not self.in_doubt:
            return  # nothing of ours is in the store
        with self.backend.reaching(self.key), self.backend.locks.hold(self.digest):
            self._dequeue()
            if self.in_doubt:
                claim = self.backend._claim(self.digest)
                if claim is not None and claim.token == self.token:
                    # If it was re-entered meanwhile (by its token), only our level goes.
                    self.backend._unwind(self.digest, claim)

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last try saw and its seconds left, for the error."""
        claim = self.seen
        now = now_us()
        if claim is None or not claim.live(now):
            return None, None
        return self.backend._holder(claim), (claim.expires_us - now) / 1e6
