"""One caller's try to take a key in etcd, and its place in the key's queue.

A try is one transaction: write the grant if no grant exists and no waiter was queued
before this attempt (none at all, for an attempt that is not queued). A waiter writes
its own key, and between tries blocks on a watch of the one key whose deletion can make
it the next: the waiter just before it, or for the head of the queue, the grant. Every
``QUEUE_TTL / 3`` it renews its place's lease; it tries again only when its watch fires,
or when the watch has run for five seconds (it is then armed afresh), so that a watch
stream lost with a member costs a delay, never the grant.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from asgiref.sync import sync_to_async

from occupy.backends.attempt import Attempt, AttemptBackend
from occupy.backends.claims import now_us
from occupy.backends.etcd.client import (
    NOT_FOUND,
    EtcdError,
    KeyValue,
    empty,
    encode,
    lease_seconds,
    none_before,
    prefix_end,
    put_op,
)
from occupy.backends.etcd.store import EtcdStore, lease_of
from occupy.leases import Holder, Lease

__all__ = ["EtcdAttempt"]

#: How long a waiter trusts one watch stream before it looks at the queue again, in
#: seconds: a stream cut with its member may end without a word, so that a waiter
#: would miss its turn for this long at most.
_REARM = 5.0


class EtcdAttempt(Attempt):
    """A try at one key: a grant transaction, a queued key, and a watch."""

    def __init__(
        self, backend: AttemptBackend, store: EtcdStore, key: str, owner: str, ttl: float
    ) -> None:
        super().__init__(backend, key, owner, ttl)
        self.store = store
        self.grants = store.grants(key)
        self.queue = store.queue(key)
        self.name = self.grants + self.token
        self.place = self.queue + self.token
        #: The lease a grant will be bound to: (id, TTL granted, when it was granted).
        self.lease: tuple[int, int, float] | None = None
        #: The waiter key's lease, when it was last renewed, and the key's revision.
        self.place_lease: tuple[int, float] | None = None
        self.queued: int | None = None
        #: The grant seen by the last failed try.
        self.seen: KeyValue | None = None
        self.woken = threading.Event()
        self._stop_watch: Callable[[], None] | None = None
        self._watching = threading.Lock()
        self._armed = 0.0

    @property
    def client(self) -> Any:
        """Return the backend's etcd client."""
        return self.store.client

    def _bound(self) -> float | None:
        return self.time_left()

    # --- trying ------------------------------------------------------------------------
    def try_acquire(self) -> Lease | None:
        """Write the grant if the key is free and nobody queued before this attempt.

        A waiter whose watch has not fired skips the round trip: nothing it waits for
        has changed (until the watch is armed again, see :meth:`wait`)."""
        if self._stop_watch is not None and not self.woken.is_set():
            return None
        with self.backend.reaching(self.key):
            for _ in range(2):
                try:
                    return self._try()
                except EtcdError as e:
                    if e.code != NOT_FOUND or self.lease is None:
                        raise
                    self.lease = None  # its lease ended while it waited: take a new one
            return None

    def _try(self) -> Lease | None:
        started, started_us = time.monotonic(), now_us()
        fresh = self.lease is None or started - self.lease[2] > self.lease[1] / 2
        if fresh:
            old = self.lease
            lease_id, granted = self.client.grant(lease_seconds(self.ttl), self._bound())
            self.lease = (lease_id, granted, started)
            if old is not None:
                with suppress(EtcdError):
                    self.client.revoke(old[0])
        assert self.lease is not None
        lease_id, granted, _at = self.lease
        fields = {
            "k": self.key,
            "o": self.owner,
            "d": 1,
            "e": started_us + round(self.ttl * 1e6),
            "s": started_us,
            "L": granted,
        }
        compare = [empty(self.grants)]
        success = [put_op(self.name, self.store.value(**fields), lease_id)]
        if self.queued is None:
            compare.append(empty(self.queue))
        else:
            compare.append(none_before(self.queue, self.queued))
            success.append({"request_delete_range": {"key": encode(self.place)}})
        failure = [
            {
                "request_range": {
                    "key": encode(self.grants),
                    "range_end": encode(prefix_end(self.grants)),
                    "limit": 1,
                }
            }
        ]
        ok, revision, replies = self.client.txn(compare, success, failure, self._bound())
        if not ok:
            kvs = replies[0].get("response_range", {}).get("kvs", []) if replies else []
            self.seen = KeyValue.parse(kvs[0]) if kvs else None
            if self.seen is None or self.seen.key != self.name:
                return None
            # A grant whose reply was lost and that was sent again: it is this one.
            revision, fields = self.seen.create_revision, self.seen.value
            if self.seen.mod_revision != revision:
                return None  # written since: not a grant this attempt can vouch for
        if not fresh:  # the lease has aged while waiting: give it its whole TTL again
            self.client.keep_alive(lease_id, self._bound())
        self._granted()
        self.store.schedule(self.token, self.name, revision, lease_id, started + self.ttl)
        return lease_of(
            self.backend, KeyValue(self.name, fields, revision, revision, lease_id), self.ttl
        )

    def _granted(self) -> None:
        """Leave the queue (the grant transaction deleted the waiter key)."""
        self.lease = None  # the grant's now: cancel must not revoke it
        self._unwatch()
        if self.place_lease is not None:
            with suppress(EtcdError):
                self.client.revoke(self.place_lease[0])
        self.place_lease = None
        self.queued = None

    # --- queueing ----------------------------------------------------------------------
    def enqueue(self) -> Lease | None:
        """Write this attempt's waiter key; its ``create_revision`` is its place."""
        with self.backend.reaching(self.key):
            lease_id, _granted = self.client.grant(
                lease_seconds(self.store.queue_ttl), self._bound()
            )
            self.place_lease = (lease_id, time.monotonic())
            now = now_us()
            place = round(self.store.queue_ttl * 1e6)
            value = self.store.value(k=self.key, o=self.owner, s=now, e=now + place)
            _ok, revision, _ = self.client.txn([], [put_op(self.place, value, lease_id)])
            self.queued = revision
        return None

    def next_delay(self) -> float:
        """Return the longest block between two renewals of the waiter's place."""
        return self.store.queue_ttl / 3

    def wait(self, seconds: float) -> None:
        """Block until the key before this attempt's (or the grant) is deleted, or
        ``seconds`` pass; renew the waiter's place when due."""
        with self.backend.reaching(self.key):
            self._renew_place()
            if self._stop_watch is not None and time.monotonic() - self._armed > _REARM:
                self._unwatch()  # a stream lost with a member says nothing: look again
                return
            if self._stop_watch is None and not self._watch():
                return  # at the head, and the key is free: try now
        if self.woken.wait(seconds):
            self._unwatch()

    async def await_wake(self, seconds: float) -> None:
        """Async twin of :meth:`wait`, in a worker thread (cancel wakes it)."""
        await sync_to_async(self.wait, thread_sensitive=False)(seconds)

    def _renew_place(self) -> None:
        if self.place_lease is None:
            return
        lease_id, renewed = self.place_lease
        if time.monotonic() - renewed < self.store.queue_ttl / 3:
            return
        if self.client.keep_alive(lease_id, self._bound()) < 0:
            self._unwatch()  # the place was lost (this process stalled): queue again
            self.enqueue()
        else:
            self.place_lease = (lease_id, time.monotonic())

    def _watch(self) -> bool:
        """Watch the key whose deletion may make this attempt next; return ``False``
        when there is none (it is at the head and the key is free)."""
        if self.queued is None:
            return False
        before = {
            "key": encode(self.queue),
            "range_end": encode(prefix_end(self.queue)),
            "limit": 1,
            "sort_order": "DESCEND",
            "sort_target": "CREATE",
            "max_create_revision": self.queued - 1,
        }
        grant = {
            "key": encode(self.grants),
            "range_end": encode(prefix_end(self.grants)),
            "limit": 1,
        }
        _ok, revision, replies = self.client.txn(
            [], [{"request_range": before}, {"request_range": grant}], None, self._bound()
        )
        ahead = replies[0].get("response_range", {}).get("kvs", [])
        held = replies[1].get("response_range", {}).get("kvs", [])
        if ahead:
            watched, end = KeyValue.parse(ahead[0]).key, None
        elif held:
            self.seen = KeyValue.parse(held[0])
            watched, end = self.grants, prefix_end(self.grants)
        else:
            return False
        with self._watching:
            self.woken.clear()
            self._stop_watch = self.client.watch(watched, end, revision + 1, self.woken.set)
            self._armed = time.monotonic()
        return True

    def _unwatch(self) -> None:
        with self._watching:
            stop, self._stop_watch = self._stop_watch, None
        self.woken.set()
        if stop is not None:
            with suppress(Exception):
                stop()

    # --- giving up ---------------------------------------------------------------------
    def cancel(self) -> None:
        """Delete the waiter key and revoke the leases this attempt took."""
        self._unwatch()
        with self.backend.reaching(self.key):
            if self.place_lease is not None:
                self.client.revoke(self.place_lease[0])  # deletes the waiter key
                self.place_lease = None
                self.queued = None
            if self.lease is not None:
                self.client.revoke(self.lease[0])
                self.lease = None

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last try saw (read again if none), and its time left."""
        seen = self.seen
        if seen is None:
            with self.backend.reaching(self.key):
                seen = self.store.current_grant(self.key)
        if seen is None:
            return None, None
        return self.store.holder_of(seen), self.store.remaining(seen)
