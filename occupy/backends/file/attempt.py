"""One try at a key of :class:`~occupy.backends.file.FileBackend`: :class:`FileAttempt`
queues a pending claim, looks at the claims ahead of it, then at the granted one, and
moves in when both are clear (see :mod:`.backend` for the protocol and its guarantees)."""

from __future__ import annotations

import logging
import secrets
import time
from typing import NoReturn

from occupy.backends.attempt import Attempt, AttemptBackend
from occupy.backends.claims import Entry, digest, now_us
from occupy.backends.file.records import Queued
from occupy.backends.file.store import FileStore, holder_of, lease_of
from occupy.leases import Holder, Lease
from occupy.validation import MAX_FENCE

logger = logging.getLogger("occupy.backends.file")

__all__ = ["FileAttempt"]


class FileAttempt(Attempt):
    """One try at a key: the fast path, then a pending claim that waits its turn."""

    def __init__(
        self, backend: AttemptBackend, store: FileStore, key: str, owner: str, ttl: float
    ) -> None:
        super().__init__(backend, key, owner, ttl)
        self.store = store
        self.directory = store.directory
        self.max_delay = store.poll_interval
        # A queued claim is heartbeated by the tries: pause well within its ttl.
        self.longest_queued_pause = min(self.longest_queued_pause, store.pending_ttl / 4)
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
        with self.backend.reaching(self.key), self.store.locks.hold(self.digest):
            self.in_doubt = True
            lease = self._try(now_us())
        self.in_doubt = False
        return lease

    def _try(self, now: int) -> Lease | None:
        # Pending claims first, then the granted one: under the key's lock both reads
        # are one step, and the order decides who is served.
        ahead = self._pending_ahead(now)
        claim = self.store.claim(self.digest)
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
        return lease_of(self.backend, self.key, self.ttl, entry)

    def enqueue(self) -> None:
        """Write the pending claim that holds this caller's place in the queue."""
        with self.backend.reaching(self.key), self.store.locks.hold(self.digest):
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
        pending_ttl = self.store.pending_ttl
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
        with self.backend.reaching(self.key), self.store.locks.hold(self.digest):
            self._dequeue()
            if self.in_doubt:
                claim = self.store.claim(self.digest)
                if claim is not None and claim.token == self.token:
                    # If it was re-entered meanwhile (by its token), only our level goes.
                    self.store.unwind(self.digest, claim)

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last try saw and its seconds left, for the error."""
        claim = self.seen
        now = now_us()
        if claim is None or not claim.live(now):
            return None, None
        return holder_of(claim), (claim.expires_us - now) / 1e6
