"""The database backend's :class:`DatabaseAttempt`: one caller's try at a key.

The fast path grants a free key in one statement. A caller that waits inserts a
``pending`` claim, which holds its place: the oldest live pending claim of a key (lowest
id) is promoted when the key comes free, first come, first served. Where the dialect
wakes waiters (PostgreSQL's ``NOTIFY``, with a driver that can wait for it), the pending
claim listens on a channel of its own; elsewhere it polls. A pending claim is kept alive by
heartbeats and expires ``PENDING_TTL`` after the last one, so a waiter that died leaves
the queue by itself.

A release that was already running when a claim was queued may have looked for waiters
before that claim was committed, and so woken nobody: a newly queued claim therefore
tries again at once, without a pause. Where the dialect wakes waiters, every promotion
waits for a release in flight to commit (see ``promote_when_released``): a wake-up that
release could not send (it looked for the next in line before the claim was queued, or
it woke a waiter that was leaving) is then not waited for.

Where waiters poll, only the head of the queue tries to promote itself; a waiter
behind others reads its place instead (a read, which takes no write lock) and paces
its looks by the queue (:meth:`Attempt.note_place`).

On SQLite, a statement that found the file write-locked by another writer for its whole
busy wait did nothing. While the caller has time left, that is one more try that did not
get the key (a waiter whose claim could not be queued queues it at its next try); once
the caller's time is up, it is :class:`~occupy.exceptions.StoreUnavailable` saying so,
never ``Occupied`` by nobody.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import IntegrityError

from occupy.backends.attempt import Attempt, AttemptBackend
from occupy.backends.claims import digest
from occupy.backends.db.statements import GuardTimedOut, Result
from occupy.backends.db.store import DatabaseStore
from occupy.exceptions import StoreUnavailable
from occupy.leases import Holder, Lease
from occupy.validation import MAX_FENCE, MAX_TTL

__all__ = ["DatabaseAttempt"]


class DatabaseAttempt(Attempt):
    """One try at a key: the fast path, then a pending claim that waits its turn. The
    statements run on the backend's ``store``; its dialect is :attr:`sql`."""

    def __init__(
        self, backend: AttemptBackend, store: DatabaseStore, key: str, owner: str, ttl: float
    ) -> None:
        super().__init__(backend, key, owner, ttl)
        self.store = store
        self.sql = store.dialect
        self.max_delay = store.poll_interval
        # A queued claim is heartbeated by the tries: pause well within its ttl.
        self.longest_queued_pause = min(self.longest_queued_pause, store.pending_ttl / 4)
        self.digest = digest(key)
        self.pending_id: int | None = None
        #: Whether the caller waits in the queue (``enqueue`` was called): a try that
        #: finds no queued claim of this attempt's (SQLite stayed locked) queues one.
        self.waits = False
        #: Whether a claim of this attempt's may exist (else cancel has nothing to do).
        self.claimed = False
        self.beat_at = 0.0
        #: The channel this attempt listens on (while queued, where the dialect wakes
        #: waiters), or None, and the driver connection that listens (a new connection
        #: must listen again).
        self.listening: str | None = None
        self.listener: Any = None
        #: Just queued: the next pause is skipped (see the module docstring).
        self.fresh = False
        self.pauses = 0
        self.content_type_id, self.object_id = store.object_of(key)

    def run(self, statement: str, params: Sequence[Any]) -> Result:
        """Run a statement held to the attempt's time left; return ``(rowcount, rows)``."""
        return self.store.execute(statement, params, key=self.key, bound=self.time_left())

    def lease(self, token: str, fence: Any, expires_at: Any) -> Lease:
        """Return the lease for a grant of this attempt's."""
        return self.backend.make_lease(
            self.key,
            owner=self.owner,
            token=token,
            fence=fence,
            expires_at=self.sql.to_datetime(expires_at),
            ttl=self.ttl,
        )

    def try_acquire(self) -> Lease | None:
        """Grant the key if it is free, or promote the queued claim if its turn has
        come; else return ``None``."""
        try:
            if self.pending_id is not None:
                if self.ahead and not self._at_head():
                    return None
                return self._promote()
            try:
                lease = self._grant_if_free() or self._look()
            except GuardTimedOut:
                # A transaction holds the key for as long as this try could wait.
                self.claimed = self.pending_id is not None
                lease = None
            if lease is None and self.waits:
                self.enqueue()  # its first insert met SQLite's write lock
            return lease
        except StoreUnavailable as e:
            if not self.store.locked_by_another(e):
                raise
            # The statement did nothing: one more try that did not get the key, while
            # the caller has time left.
            self.claimed = self.pending_id is not None
            if self.out_of_time():
                raise self.store.statements.stayed_locked(self.key) from e.__cause__
            return None

    def _grant_if_free(self) -> Lease | None:
        self.claimed = True
        rows = self.store.execute(
            self.sql.grant_if_free(),
            [
                *self.sql.guard_params(self.key, self.guard_left()),
                self.key,
                self.digest,
                self.digest,
                self.content_type_id,
                self.object_id,
                self.owner,
                self.token,
                self.sql.seconds(self.ttl),
                self.digest,
            ],
            key=self.key,
            settled=self._granted,
            bound=self.time_left(),
        )[1]
        if not rows:
            self.claimed = self.pending_id is not None
            return None
        return self.lease(self.token, *rows[0])

    def guard_left(self) -> float | None:
        """Return how long a grant may wait for a transaction that holds the key: the
        caller's time left, at least a round trip's grace (``None``: for ever)."""
        return self.time_left()

    def _granted(self) -> Result | None:
        """Return this attempt's grant as a grant statement would (fence and expiry
        first), if one whose reply was lost made it; else ``None``.

        The token is this attempt's own, so a claim with it is this grant, never a
        level to add: a lost reply retried blindly would re-enter the caller's own
        fresh claim (depth 2, and one release would leave the key held).
        """
        rows = self.run(self.sql.granted(), [self.digest, self.token])[1]
        return (len(rows), [row[:2] for row in rows]) if rows else None

    def _queued(self) -> Result | None:
        """Return this attempt's pending claim as the enqueue statement would (its id),
        if one whose reply was lost made it; else ``None``."""
        rows = self.run(self.sql.queued(), [self.digest, self.token])[1]
        return (len(rows), rows) if rows else None

    def _look(self) -> Lease | None:
        """After the fast path failed: clear expired claims and try again, or report
        held. A live claim of the same owner is no exception: owners do not re-enter
        (see :mod:`occupy.reentry`)."""
        rows = self.run(self.sql.claims_of_key(), [self.digest])[1]
        if not rows:
            return self._grant_if_free()
        top = max((int(row[4]) for row in rows if row[4] is not None), default=0)
        if top >= MAX_FENCE:  # the grant refused to count past it
            raise self.store.fence_exhausted(self.key, top)
        now = self.sql.to_datetime(rows[0][7])
        farthest = now + timedelta(seconds=MAX_TTL)  # a later expiry is not occupy's
        expired = any(not now < self.sql.to_datetime(row[6]) <= farthest for row in rows)
        if expired:
            self.run(self.sql.purge_expired_of_key(), [self.digest])
            return self._grant_if_free()
        return None

    def enqueue(self) -> None:
        """Insert the pending claim that holds this caller's place in the queue, and
        where the dialect wakes waiters, listen on its channel. If SQLite stayed locked
        by another writer while the caller has time left, nothing is queued yet: the
        next try queues it."""
        self.waits = self.claimed = True
        try:
            self.pending_id = int(
                self.store.execute(
                    self.sql.enqueue(),
                    [
                        self.key,
                        self.digest,
                        self.content_type_id,
                        self.object_id,
                        self.owner,
                        self.token,
                        self.sql.seconds(self.store.pending_ttl),
                    ],
                    key=self.key,
                    settled=self._queued,
                    bound=self.time_left(),
                )[1][0][0]
            )
        except StoreUnavailable as e:
            if not self.sql.is_busy(e.__cause__):
                raise
            # SQLite stayed locked: the insert did nothing.
            self.claimed = False
            self.pending_id = None
            self.note_place(None)
            if not self.store.locked_by_another(e):
                raise
            if self.out_of_time():
                raise self.store.statements.stayed_locked(self.key) from e.__cause__
            return
        self.beat_at = time.monotonic()
        self.fresh = True
        self.pauses = 0
        self.note_place(None)
        if self.store.hears_wake_ups and not self.asynchronous:
            self._unlisten()  # queued again under a new id: listen on the new channel
            self.store.forget_listen()
            self.listening = self.sql.channel(self.pending_id)
            self.listener = self.store.listen(self.listening, key=self.key, bound=self.time_left())

    def _at_head(self) -> bool:
        """Read this claim's place in the queue (a waiter that polls: it is not woken);
        return whether it is first in line and the key free, else heartbeat it."""
        ahead, held = self.run(
            self.sql.queue_position(), [self.digest, self.pending_id, self.digest]
        )[1][0]
        self.note_place(int(ahead))
        if ahead or held:
            self._keep_queued()
            return False
        return True

    def _promote(self) -> Lease | None:
        assert self.pending_id is not None
        statement = self.sql.promote()
        params = [
            self.digest,
            self.digest,
            self.sql.seconds(self.ttl),
            self.pending_id,
            self.digest,
            self.pending_id,
        ]
        guard = self.sql.guard_params(self.key, self.guard_left())
        if self.sql.wakes_waiters:
            statement, params = self.sql.promote_when_released(), [*guard, self.digest, *params]
        else:
            params = [*guard, *params]
        for _ in range(2):
            try:
                count, rows = self.store.execute(
                    statement, params, key=self.key, settled=self._granted, bound=self.time_left()
                )
                break
            except GuardTimedOut:
                self._keep_queued()  # a transaction holds the key: still in line
                return None
            except IntegrityError:
                # An expired holder still has the slot: clear it and try again at once
                # (nobody will notify: an expired holder never releases).
                self.run(self.sql.purge_expired_of_key(), [self.digest])
        else:
            return None
        if not (rows if self.sql.update_returning else count):
            if self.ahead is None and not self.listening:
                self._at_head()  # learn this claim's place (it heartbeats the claim)
            else:
                self._keep_queued()
            return None
        if not self.sql.update_returning:
            rows = self.run(self.sql.granted(), [self.digest, self.token])[1]
            if not rows:
                return None
        if self.listening:
            # UNLISTEN waits for the release: the holder starts work now.
            self.store.unlisten_later(self.listening)
            self.listening = None
        return self.lease(self.token, *rows[0][:2])

    def _keep_queued(self) -> None:
        """Heartbeat the pending claim; if it expired meanwhile, queue again."""
        if time.monotonic() - self.beat_at < self.store.pending_ttl / 3:
            return
        count = self.run(
            self.sql.heartbeat(), [self.sql.seconds(self.store.pending_ttl), self.pending_id]
        )[0]
        self.beat_at = time.monotonic()
        if not count:
            self.run(self.sql.forget(), [self.digest, self.token])
            self.enqueue()

    def wait(self, seconds: float) -> None:
        """Sleep, or where the dialect wakes waiters, wait to be woken (polling as
        fallback).

        A waiter whose connection dropped keeps its place: the next try reconnects
        (queueing again if its claim expired meanwhile), and the wait after it listens
        again on the new connection.
        """
        channel = self.listening
        if not channel or seconds <= 0:
            time.sleep(seconds)
            return
        self.listener = self.store.await_wake(
            channel, self.listener, seconds, key=self.key, bound=self.time_left()
        )

    def next_delay(self) -> float:
        """Return the next pause: none right after queueing; then while listening the
        fallback poll, one interval and then :attr:`~Attempt.longest_queued_pause` (it
        only notices a holder or waiter that vanished without a word, or the rare
        wake-up lost in the race that :meth:`promote_when_released` narrows), else the polling
        pause of :class:`Attempt`."""
        if self.fresh:
            self.fresh = False
            return 0.0
        if self.listening:
            self.pauses += 1
            return self.max_delay if self.pauses == 1 else self.longest_queued_pause
        return super().next_delay()

    def cancel(self) -> None:
        """Delete this attempt's claim, queued or granted, and wake the next waiter. If
        the store cannot be reached, the clean-up is left to run before the backend's
        next statement that can (see :meth:`Statements.defer`), and the error raised."""
        steps: list[tuple[str, list[Any]]] = []
        if self.claimed:
            steps.append((self.sql.forget(), [self.digest, self.token]))
        wake = self.sql.wake_next()
        if self.pending_id is not None and wake is not None:
            steps.append((wake, [self.digest]))
        for i, (statement, params) in enumerate(steps):
            try:
                self.run(statement, params)
            except StoreUnavailable:
                # Moot once the claim has expired by itself: a pending claim after its
                # heartbeat's PENDING_TTL, a grant in doubt after its ttl.
                until = time.monotonic() + max(self.store.pending_ttl, self.ttl)
                self.store.statements.defer(steps[i:], until)
                self.listening = None  # its session is gone, and what it listened to
                raise
        self._unlisten()

    def _unlisten(self) -> None:
        if self.listening:
            channel, self.listening = self.listening, None
            self.run(self.sql.unlisten(channel), [])

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder and its remaining seconds, by the database's clock; raise
        ``StoreUnavailable`` instead if no grant could be made for want of a fence."""
        self.store.refuse_exhausted_fence(self.key)
        found = self.store.holder_and_remaining(self.key)
        return (None, None) if found is None else found
