"""occupy's one Redis lock protocol, as a backend: :class:`RedisLockBackend`.

The protocol is the scripts and key layout of :mod:`.scripts`, run on the
:class:`~.link.RedisLink` of a raw redis-py client, and the
:class:`~.attempt.RedisAttempt` that drives them. Two backends are this one, each
with the client it has: :class:`~occupy.backends.redis.RedisBackend` on the client of
a django-redis cache (``get_redis_connection``), and the cache backend on the raw
client of a Redis cache (django-redis, or Django's own ``RedisCache``), under a prefix
taken from the cache's ``make_key``. Either way, what the protocol guarantees is the
same:

- Each operation is one script on one Redis primary: take (with its fence), release
  and extend compare the token on the server, so a late release or extend never
  touches the next holder. Redis expires claims itself; nothing needs sweeping.
- Fences are the server's ``TIME`` in microseconds, or one above the last fence if that
  is ahead: they rise across releases, expiry, restarts and a lost counter.
- Waiting is first come, first served: a waiter joins the key's queue and blocks with
  ``BLPOP`` on its own wake-up list; a release hands the key to the oldest live waiter
  and wakes it with the grant. A wake-up that never comes (the holder died, a failover)
  costs at most the poll interval, or less when the holder's lease expires sooner.
- Re-entry by token, takeover, resume, and listing the claims (``SCAN``) are scripts
  or reads of the same keys.
- A value under a lock's key that occupy did not write (an older layout, another app's
  value under a shared prefix, another type) is held by an unknown holder
  (:data:`~occupy.backends.claims.UNKNOWN_OWNER`) until Redis expires it, never free.
- An acquire's calls are held to its time left (:class:`~.calls.BoundedCalls`), so a
  server that stops answering ends it with ``StoreUnavailable`` instead of blocking
  it; a failing server raises ``StoreUnavailable`` (naming the backend and the key,
  from redis-py's error) from every operation.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from redis.exceptions import RedisError, ResponseError

from occupy.backends.base import BaseBackend, Claim
from occupy.backends.redis.attempt import RedisAttempt
from occupy.backends.redis.keys import RedisKeys
from occupy.backends.redis.link import RedisLink
from occupy.backends.redis.values import (
    Held,
    read_held,
    server_ms,
    text,
    to_datetime,
    to_ms,
    waiting_claims,
    wrong_type,
)
from occupy.exceptions import TakeoverRefused
from occupy.leases import Holder, Lease, new_token

__all__ = ["RedisLockBackend"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class RedisLockBackend(BaseBackend):
    """A backend whose every operation is the Redis lock protocol, on the
    :class:`~.link.RedisLink` that :meth:`make_link` gives (built on first use)."""

    store_errors: tuple[type[BaseException], ...] = (RedisError,)

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self._link: RedisLink | None = None
        self._connecting = threading.Lock()

    def make_link(self) -> RedisLink:
        """Return the protocol's link on this backend's raw redis-py client."""
        raise NotImplementedError(
            "subclasses of RedisLockBackend must provide a make_link() method"
        )

    @property
    def link(self) -> RedisLink:
        """Return the link the protocol runs on (made by :meth:`make_link` on first use)."""
        link = self._link
        if link is None:
            with self._connecting:
                if self._link is None:
                    self._link = self.make_link()
                link = self._link
        return link

    def use_link(self, link: RedisLink) -> None:
        """Run the protocol on ``link`` from now on (closing the one before)."""
        with self._connecting:
            old, self._link = self._link, link
        if old is not None:
            old.close()

    @property
    def client(self) -> Any:
        """Return the raw redis-py client the locks are on."""
        return self.link.client

    def keys(self, key: str) -> RedisKeys:
        """Return the Redis keys that hold lock ``key``."""
        return self.link.keys(key)

    def close(self) -> None:
        """Stop the async waiters' threads and close the link's own connections; the
        client's connection pool is not ours (the link is made again when next used)."""
        with self._connecting:
            link, self._link = self._link, None
        if link is not None:
            link.close()

    # --- the contract ------------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> RedisAttempt:
        """Return an attempt to take ``key`` (see :class:`RedisAttempt`)."""
        return RedisAttempt(self, self.link, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Undo one level of the lease; on the last, hand the key to the next waiter."""
        try:
            released = self.link.scripts.release(self.keys(lease.key).lock, lease.token)
        except RedisError as e:
            raise self.unavailable(lease.key, e) from e
        if not released:
            raise lease.mark_lost("it expired or was taken over before release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after the server's now."""
        ttl_ms = to_ms(ttl)
        try:
            expires = self.link.scripts.extend(self.keys(lease.key).lock, lease.token, ttl_ms)
        except RedisError as e:
            raise self.unavailable(lease.key, e) from e
        if expires is None:
            raise lease.mark_lost("it expired or was taken over before it was extended")
        lease.expires_at = to_datetime(expires)

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``: one script."""
        try:
            reply = self.link.scripts.resume(self.keys(key).lock, token, to_ms(ttl), int(deeper))
        except RedisError as e:
            raise self.unavailable(key, e) from e
        if reply is None:
            return None
        fence, expires, depth, tail = text(reply).split(" ", 3)
        return self.make_lease(
            key,
            owner=tail.split("\0", 1)[0],
            token=token,
            fence=int(fence),
            expires_at=to_datetime(expires),
            ttl=ttl,
            depth=int(depth),
        )

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it (only the
        grant with fence ``if_fence``, if given): one script. Return the lease and the
        holder replaced."""
        token = new_token()
        try:
            numbers, previous, *refused = self.link.scripts.takeover(
                self.keys(key).lock,
                token,
                f"{owner}\0{key}",
                to_ms(ttl),
                "" if if_fence is None else str(if_fence),
            )
        except RedisError as e:
            raise self.unavailable(key, e) from e
        if numbers is None:
            assert if_fence is not None  # only a conditional takeover is refused
            raise self._refused(key, if_fence, previous, refused)
        fence, expires, _since = text(numbers).split(" ")
        lease = self.make_lease(
            key,
            owner=owner,
            token=token,
            fence=int(fence),
            expires_at=to_datetime(expires),
            ttl=ttl,
        )
        return lease, (Held.parse(previous, with_token=False).holder() if previous else None)

    def _refused(
        self, key: str, if_fence: int, previous: Any, refused: list[Any]
    ) -> TakeoverRefused:
        """Return the error for a conditional takeover the script refused, naming the
        holder it found (see :data:`~occupy.backends.redis.held.TAKEOVER`)."""
        if previous is None:
            return self.takeover_refused(key, if_fence, None, None)
        now_ms = int(refused[0])
        held = (
            Held.unknown(key, now_ms, int(refused[1]))
            if text(previous) == "?"
            else Held.parse(previous, with_token=False)
        )
        return self.takeover_refused(key, if_fence, held.holder(), (held.expires - now_ms) / 1000)

    def holder(self, key: str) -> Holder | None:
        """Return the holder's owner, expiry and fence, or ``None`` (never the token).

        A value occupy did not write is held by :data:`~occupy.backends.claims.UNKNOWN_OWNER`
        (fence 0) until Redis expires it.
        """
        try:
            held = read_held(self.link.client, self.keys(key).lock, key)
        except RedisError as e:
            raise self.unavailable(key, e) from e
        return None if held is None else held.holder()

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds the key."""
        try:
            value = self.link.client.get(self.keys(lease.key).lock)
        except ResponseError as e:
            if wrong_type(e):
                return False  # another type under the key: not ours
            raise self.unavailable(lease.key, e) from e
        except RedisError as e:
            raise self.unavailable(lease.key, e) from e
        if isinstance(value, bytes):  # compared as bytes: a foreign value need not be UTF-8
            return value.startswith(f"{lease.token} ".encode())
        return value is not None and str(value).startswith(f"{lease.token} ")

    def claims(self) -> list[Claim]:
        """Return holders (``using``) and live waiters (``pending``) by key, never tokens.

        A value occupy did not write is listed under its Redis key's name (the lock key
        it stands for cannot be known), held by
        :data:`~occupy.backends.claims.UNKNOWN_OWNER`, with no start and no fence.
        """
        try:
            found = self._claims()
        except RedisError as e:
            raise self.unavailable(None, e) from e
        found.sort(key=lambda c: (c.key, c.state != "using", c.since or _EPOCH))
        return found

    def _claims(self) -> list[Claim]:
        client = self.link.client
        pattern = _glob_escape(self.link.prefix) + "{*}:"
        found: list[Claim] = []
        for name in client.scan_iter(match=pattern + "lock", count=1000):
            held = read_held(client, name, None)
            if held is not None:
                found.append(held.claim(name))
        now_ms = server_ms(client)
        for name in client.scan_iter(match=pattern + "waiters", count=1000):
            found.extend(waiting_claims(client, text(name), now_ms))
        return found


def _glob_escape(pattern: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in pattern)
