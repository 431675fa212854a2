"""One try at a key under the Redis lock protocol: :class:`RedisAttempt`.

One script per try; a waiter joins the key's queue and blocks with ``BLPOP`` on its
own wake-up list, where a release hands it the key (see
:mod:`occupy.backends.redis.protocol` for what the protocol guarantees).
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any

from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from occupy.backends.base import STORE_GRACE, Attempt, BaseBackend
from occupy.backends.redis.link import RedisLink
from occupy.backends.redis.values import Held, text, to_datetime, to_ms
from occupy.leases import Holder, Lease

__all__ = ["RedisAttempt"]


class RedisAttempt(Attempt):
    """One try at a key: one script per try; waiting blocks on the attempt's wake list."""

    def __init__(
        self, backend: BaseBackend, link: RedisLink, key: str, owner: str, ttl: float
    ) -> None:
        super().__init__(backend, key, owner, ttl)
        self.link = link
        self.rkeys = link.keys(key)
        self.ttl_ms = to_ms(ttl)
        #: Owner and key as the scripts store them, one argument.
        self.tail = f"{owner}\0{key}"
        #: A grant handed over by a release, read from the wake-up list.
        self.handed: Lease | None = None
        self.queued = False
        #: The holder as the last refusal saw it, and the server's now then (ms).
        self.seen: tuple[Held, int] | None = None

    def _run(self, mode: str) -> Lease | None:
        scripts = self.link.scripts
        script = scripts.acquire if mode == "try" else scripts.queue
        try:
            reply = script(
                self.rkeys.lock, self.token, self.tail, self.ttl_ms, bound=self.time_left()
            )
        except RedisError as e:
            raise self.backend.unavailable(self.key, e) from e
        if isinstance(reply, list):
            now = int(reply[1])
            held = None
            if reply[0]:
                with suppress(ValueError):  # a value that only looks like ours: not UTF-8
                    held = Held.parse(reply[0], with_token=False)
            if held is None:  # a value occupy did not write (scripts: FOREIGN)
                held = Held.unknown(self.key, now, int(reply[2]) if len(reply) > 2 else -1)
            self.seen = (held, now)
            return None
        fence, expires, _since, depth, token = text(reply).split(" ")
        return self._lease(token, fence, expires, int(depth))

    def _lease(self, token: str, fence: Any, expires: Any, depth: int = 1) -> Lease:
        return self.backend.make_lease(
            self.key,
            owner=self.owner,
            token=token,
            fence=int(fence),
            expires_at=to_datetime(expires),
            ttl=self.ttl,
            depth=depth,
        )

    def try_acquire(self) -> Lease | None:
        """Grant, or (once queued) keep this attempt's place in the queue."""
        if self.handed is not None:
            return self.handed
        return self._run("queue" if self.queued else "try")

    def enqueue(self) -> Lease | None:
        """Join the queue; if the key came free meanwhile, take it at once."""
        self.queued = True
        return self._run("queue")

    def next_delay(self) -> float:
        """Return how long to block: the poll interval, or until the holder expires."""
        longest = self.link.longest_block
        if self.seen is None:
            return longest
        held, now = self.seen
        return min(longest, max(0.001, (held.expires - now) / 1000 + 0.002))

    def wait(self, seconds: float) -> None:
        """Block on this attempt's wake-up list until a release hands it the key."""
        if self.handed is not None:
            return
        name, block = self.rkeys.wake + self.token, round(max(seconds, 0.001), 3)
        bounded = self.link.bounded if self.deadline is not None else None
        try:
            if bounded is None:
                reply = self.link.client.blpop([name], timeout=block)
            else:
                reply = bounded(block + STORE_GRACE, "BLPOP", name, block)
        except RedisTimeoutError:
            return  # the next try looks again
        except RedisError as e:
            raise self.backend.unavailable(self.key, e) from e
        if reply:
            fence, expires, _since = text(reply[1]).split(" ")
            self.handed = self._lease(self.token, fence, expires)
            try:  # with REPLICAS, the handover must have reached the replicas
                self.link.replication.confirm_handover(
                    self.link.scripts, self.rkeys.lock, self.token, self.ttl_ms
                )
            except RedisError as e:
                raise self.backend.unavailable(self.key, e) from e

    async def await_wake(self, seconds: float) -> None:
        """Async twin of :meth:`wait`: block in the link's own thread pool.

        A cancelled waiter's thread finishes its short ``BLPOP`` on its own; the
        cancellation has already removed everything it could be woken for.
        """
        if self.handed is not None:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.link.wait_executor(), self.wait, seconds)

    def cancel(self) -> None:
        """Leave the queue, drop the wake-up list, and give back a key handed over."""
        try:
            self.link.scripts.cancel(self.rkeys.lock, self.token, bound=self.time_left())
        except RedisError as e:
            raise self.backend.unavailable(self.key, e) from e

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last refusal saw and its seconds left, by Redis's clock."""
        if self.seen is None:
            return None, None
        held, now = self.seen
        return held.holder(), (held.expires - now) / 1000
