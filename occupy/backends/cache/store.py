"""The lock on a Django cache without the Redis protocol: entries taken with ``add``.

:class:`CacheStore` reads and writes a key's entry through ``add``, ``get``, ``set``
and ``delete`` (the whole of Django's cache API), with the safety margin its docstring
explains; :class:`AddProtocol` carries out
:class:`~occupy.backends.cache.CacheBackend`'s contract on it, and :class:`CacheAttempt`
takes a key by polling. What this path guarantees, and what it cannot:

- Taking a key is one ``add``: atomic wherever the cache's ``add`` is (memcached,
  Redis), a read then a write on the file and database caches (``occupy.W002``).
- Release, extend and re-entry read the entry, compare the token, then write: a write
  goes out only while the entry read still has more than the margin to live, so a
  late release or extend never touches the next holder unless the process stalls
  for longer than the margin between its check and its write.
- Fences are ``max(counter + 1, this host's clock in µs)``: they rise across releases,
  expiry and a lost counter, as long as the hosts' clocks are in step (NTP).
- Waiters poll (capped backoff, at most ``POLL_INTERVAL`` apart): whoever polls first
  after a release wins. Claims cannot be listed (the cache cannot enumerate keys).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from django.core.cache import caches

from occupy.backends.base import Attempt, BaseBackend, Claim
from occupy.backends.claims import Entry, digest, from_us, now_us
from occupy.leases import Holder, Lease, new_token
from occupy.validation import MAX_FENCE

__all__ = [
    "FENCE_MEMORY_MS",
    "PREFIX",
    "AddProtocol",
    "CacheAttempt",
    "CacheStore",
    "FenceUnavailable",
    "Names",
    "Outcome",
    "names",
]

logger = logging.getLogger("occupy.backends.cache")

#: What every cache key occupy writes starts with, before the cache's ``make_key``.
PREFIX = "occupy:"
#: How long a key's fence counter outlives its last grant. Fences are floored by the
#: clock, so a counter that expired only matters if the clock steps back meanwhile.
FENCE_MEMORY_MS = 24 * 3600 * 1000


class FenceUnavailable(Exception):
    """A key's fence counter holds what no fence can follow: a value occupy did not write
    (a takeover rewrites it) or the largest fence, ``MAX_FENCE``. The backend reports it
    as ``StoreUnavailable`` (it is one of its ``store_errors``)."""


class Names(NamedTuple):
    """The cache names of a key's entry and of its fence counter."""

    entry: str
    fence: str


def names(key: str) -> Names:
    """Return the cache names of ``key``'s entry and fence counter (before the cache's
    own ``make_key``)."""
    base = f"{PREFIX}{{{digest(key)}}}:"
    return Names(f"{base}lock", f"{base}fence")


class Outcome(NamedTuple):
    """What a grant attempt found: the grant, or the entry that holds the key."""

    granted: Entry | None
    holder: Entry | None
    now_us: int


class CacheStore:
    """The lock on any Django cache, through ``add``, ``get``, ``set`` and ``delete``.

    ``add`` is the only atomic step Django's cache API offers; there is no
    compare-and-set. So after ``add`` (to record the fence) and in release, re-entry and
    extend, this reads the entry, compares the token, then writes or deletes. The write
    is only made if the entry read still had more than ``margin`` seconds to live and
    the write goes out before that much time has passed since the read; otherwise the
    entry is left to expire by itself (release) or the lease is reported lost (extend).
    What remains: a process stalled for longer than the margin *between* that check and
    its write (a long GC pause, a swapped-out process, a cache that evicts early) can
    still overwrite or delete the next holder's entry, and a fence counter written by
    such a process can go down (the clock floor keeps fences rising in practice). On
    memcached-like caches, keep ``ttl`` well above the margin and the margin well above
    a round trip. Time is this host's clock: hosts sharing a cache must keep their
    clocks in step (NTP).
    """

    atomic = False

    def __init__(self, alias: str, margin: float) -> None:
        self.alias = alias
        self.margin = margin
        cache = caches[alias]
        # memcached stores whole seconds and turns 0 into "expire now": round up, so a
        # lease never ends early (its entry may live up to a second longer than asked).
        self.whole_seconds = type(cache).__module__.endswith("memcached")

    @property
    def cache(self) -> Any:
        return caches[self.alias]  # one instance per thread, as Django hands them out

    def _timeout(self, expires_us: int) -> float:
        seconds = max(expires_us - now_us(), 1) / 1e6
        return math.ceil(seconds) if self.whole_seconds else seconds

    def _in_time(self, since: float, remaining: float, ttl: float) -> bool:
        """Return whether a write may still go out for an entry read at ``since``
        (monotonic) with ``remaining`` seconds to live."""
        return time.monotonic() - since < remaining - min(self.margin, ttl / 4)

    def _get(self, name: str) -> Entry | None:
        value = self.cache.get(name)
        return None if value is None else Entry._make(value)

    def grant(self, key: str, owner: str, token: str, ttl: float) -> Outcome:
        """Grant ``key`` if it is free, else report who holds it."""
        entry_name, fence_name = names(key)
        cache = self.cache
        started = time.monotonic()
        now = now_us()
        entry = Entry(token, owner, 0, 1, now + round(ttl * 1e6), now, key)
        if cache.add(entry_name, tuple(entry), self._timeout(entry.expires_us)):
            try:
                entry = entry._replace(fence=self._next_fence(cache, fence_name, now))
            except FenceUnavailable:
                cache.delete(entry_name)  # granted without a fence: given back
                raise
            if not self._in_time(started, ttl, ttl):
                return Outcome(None, None, now)  # it may have expired meanwhile: let it go
            cache.set(entry_name, tuple(entry), self._timeout(entry.expires_us))
            return Outcome(entry, None, now)
        current = self._get(entry_name)
        now = now_us()
        if current is None or not current.live(now):
            return Outcome(None, None, now)  # gone or going: the next try may have it
        return Outcome(None, current, now)

    def resume(self, key: str, token: str, ttl: float, levels: int) -> Entry | None:
        """Add ``levels`` to ``token``'s grant and keep it at least ``ttl`` more; return
        the entry, or ``None`` if the token does not hold ``key`` or the entry is too
        close to its expiry to be written safely (then it is left to expire)."""
        found = self._writable(key, token, ttl)
        if found is None:
            return None
        entry_name, current, now = found
        entry = current._replace(
            depth=current.depth + levels, expires_us=max(current.expires_us, now + round(ttl * 1e6))
        )
        self.cache.set(entry_name, tuple(entry), self._timeout(entry.expires_us))
        return entry

    def takeover(
        self, key: str, owner: str, token: str, ttl: float, if_fence: int | None = None
    ) -> Outcome:
        """Grant ``key`` to ``token`` whoever holds it (only the live entry with fence
        ``if_fence``, if given), with a higher fence; return the grant and the live
        entry it replaced, if any, or no grant and the live entry that is not the one
        named. A read then a write, like release on these caches: two takeovers at the
        same moment can both think they won, and the later write holds the key (both
        fences still rise). A conditional one writes only while the entry read still
        has more than the margin to live, as release does: else it is refused."""
        entry_name, fence_name = names(key)
        cache = self.cache
        read_at = time.monotonic()
        found = self.holder(key)
        previous = None if found is None else found[0]
        if if_fence is not None and (
            found is None
            or found[0].fence != if_fence
            or not self._in_time(read_at, (found[0].expires_us - found[1]) / 1e6, ttl)
        ):
            return Outcome(None, previous, now_us() if found is None else found[1])
        now = now_us()
        fence = self._next_fence(
            cache, fence_name, now, repair=True, floor=0 if previous is None else previous.fence
        )
        entry = Entry(token, owner, fence, 1, now + round(ttl * 1e6), now, key)
        cache.set(entry_name, tuple(entry), self._timeout(entry.expires_us))
        return Outcome(entry, previous, now)

    def _writable(self, key: str, token: str, ttl: float) -> tuple[str, Entry, int] | None:
        """Return ``key``'s entry name, its entry and now if ``token`` holds it with
        enough time left to write it safely (see the class docstring), else ``None``."""
        entry_name = names(key).entry
        read_at = time.monotonic()
        current = self._get(entry_name)
        now = now_us()
        if current is None or current.token != token or not current.live(now):
            return None
        if not self._in_time(read_at, (current.expires_us - now) / 1e6, ttl):
            logger.warning("%r had less than the safety margin left: not written", key)
            return None
        return entry_name, current, now

    def _next_fence(
        self, cache: Any, name: str, now: int, *, floor: int = 0, repair: bool = False
    ) -> int:
        """Return the next fence: above the counter, ``floor`` (a holder's fence) and
        the clock in µs. A counter occupy did not write raises
        :class:`FenceUnavailable`, unless ``repair`` (a takeover), which rewrites it;
        a counter at ``MAX_FENCE`` always does."""
        # Only the holder writes the counter, so a read then a write is serialized by the
        # lock itself; the clock floor covers a counter the cache evicted or lost.
        last = cache.get(name)
        if last is None:
            last = 0
        elif type(last) is not int or not 0 <= last <= MAX_FENCE:
            if not repair:
                raise FenceUnavailable(
                    f"the fence counter {name!r} holds {last!r:.40}, which is not a fence "
                    "occupy wrote: no fence can be handed out for the key until "
                    "occupy.takeover() on it rewrites it."
                )
            last = 0
        last = max(last, floor)
        if last >= MAX_FENCE:
            raise FenceUnavailable(
                f"the fence counter {name!r} is at the largest fence, {MAX_FENCE} (2^63 - "
                "1), and cannot rise: delete it by hand; fences then restart from the clock, "
                "below those handed out, so storage that compares them must forget them."
            )
        fence = max(last + 1, now)
        cache.set(name, fence, FENCE_MEMORY_MS / 1000)
        return fence

    def release(self, key: str, token: str, ttl: float) -> int:
        """Undo one level of ``token``'s grant: -1 if not held, else the depth left."""
        entry_name = names(key).entry
        read_at = time.monotonic()
        current = self._get(entry_name)
        now = now_us()
        if current is None or current.token != token or not current.live(now):
            return -1
        in_time = self._in_time(read_at, (current.expires_us - now) / 1e6, ttl)
        if current.depth > 1:
            if in_time:  # else it expires before anyone could use the lower depth
                self.cache.set(
                    entry_name,
                    tuple(current._replace(depth=current.depth - 1)),
                    self._timeout(current.expires_us),
                )
            return current.depth - 1
        if in_time:
            self.cache.delete(entry_name)
        return 0

    def extend(self, key: str, token: str, ttl: float) -> int | None:
        """Move the grant's expiry to ``ttl`` after now; ``None`` if it cannot."""
        found = self._writable(key, token, ttl)
        if found is None:
            return None
        entry_name, current, now = found
        entry = current._replace(expires_us=now + round(ttl * 1e6))
        self.cache.set(entry_name, tuple(entry), self._timeout(entry.expires_us))
        return entry.expires_us

    def holder(self, key: str) -> tuple[Entry, int] | None:
        """Return the live entry holding ``key`` and this host's now."""
        current = self._get(names(key).entry)
        now = now_us()
        return (current, now) if current is not None and current.live(now) else None

    def is_held(self, key: str, token: str) -> bool:
        """Return whether ``token`` holds ``key`` unexpired."""
        found = self.holder(key)
        return found is not None and found[0].token == token

    def forget(self, key: str, token: str, ttl: float) -> None:
        """Delete ``key``'s entry if ``token`` holds it (a grant whose caller gave up)."""
        if self.is_held(key, token):
            self.release(key, token, ttl)

    def entries(self) -> Iterable[Entry]:
        """Refuse: Django's cache API cannot enumerate keys."""
        raise NotImplementedError(
            f"occupy cannot list the locks on cache {self.alias!r} "
            f"({type(self.cache).__name__}): Django's cache API cannot enumerate keys "
            "(only Redis caches can). Ask occupy.holder(key) about one key instead."
        )


class AddProtocol:
    """The lock on a cache without the Redis protocol: :class:`CacheStore`'s entries,
    taken with ``add``; waiters poll. Carries out ``backend``'s contract (a
    :class:`~occupy.backends.cache.CacheBackend`)."""

    def __init__(self, backend: BaseBackend, store: CacheStore, poll_interval: float) -> None:
        self.backend = backend
        self.store = store
        #: The longest pause between two tries while waiting.
        self.poll_interval = poll_interval

    def lease(self, key: str, owner: str, ttl: float, entry: Entry) -> Lease:
        """Return the lease for a grant the store made."""
        return self.backend.make_lease(
            key,
            owner=owner,
            token=entry.token,
            fence=entry.fence,
            expires_at=from_us(entry.expires_us),
            ttl=ttl,
            depth=entry.depth,
        )

    def attempt(self, key: str, owner: str, ttl: float) -> CacheAttempt:
        """Return an attempt to take ``key`` (see :class:`CacheAttempt`)."""
        return CacheAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Undo one level of the lease; raise ``LeaseLost`` if it was no longer held."""
        with self.backend.reaching(lease.key):
            depth = self.store.release(lease.key, lease.token, lease.ttl)
        if depth < 0:
            raise lease.mark_lost("it expired or was taken over before release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after this host's now."""
        with self.backend.reaching(lease.key):
            expires = self.store.extend(lease.key, lease.token, ttl)
        if expires is None:
            raise lease.mark_lost("it expired or was taken over before it was extended")
        lease.expires_at = from_us(expires)

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``."""
        with self.backend.reaching(key):
            entry = self.store.resume(key, token, ttl, int(deeper))
        return None if entry is None else self.lease(key, entry.owner, ttl, entry)

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it (only the
        entry with fence ``if_fence``, if given): a read then a write, see
        :meth:`CacheStore.takeover`."""
        with self.backend.reaching(key):
            entry, previous, now = self.store.takeover(key, owner, new_token(), ttl, if_fence)
        holder = None if previous is None else _holder(previous)
        if entry is None:
            assert if_fence is not None  # only a conditional takeover is refused
            raise self.backend.takeover_refused(
                key,
                if_fence,
                holder,
                None if previous is None else (previous.expires_us - now) / 1e6,
            )
        return self.lease(key, owner, ttl, entry), holder

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` (owner, expiry, fence; never the token), or ``None``."""
        with self.backend.reaching(key):
            found = self.store.holder(key)
        return None if found is None else _holder(found[0])

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds its key."""
        with self.backend.reaching(lease.key):
            return self.store.is_held(lease.key, lease.token)

    def claims(self) -> list[Claim]:
        """Return the store's entries as claims: :meth:`CacheStore.entries` refuses
        (``NotImplementedError``), since Django's cache API cannot enumerate keys."""
        with self.backend.reaching(None):
            entries = sorted(self.store.entries(), key=lambda e: e.key)
        return [
            Claim(e.key, e.owner, "using", from_us(e.since_us), from_us(e.expires_us), e.fence)
            for e in entries
        ]

    def drop_claim(self, key: str) -> None:
        """Delete the entry of ``key`` behind its holder's back (a test hook)."""
        self.store.cache.delete(names(key).entry)

    def close(self) -> None:
        """Do nothing: the cache's connections are Django's."""


def _holder(entry: Entry) -> Holder:
    return BaseBackend.make_holder(
        entry.owner, from_us(entry.expires_us), entry.fence, since=from_us(entry.since_us)
    )


class CacheAttempt(Attempt):
    """One try at a key on a cache without the Redis protocol: ``add`` each time;
    waiters poll."""

    def __init__(self, protocol: AddProtocol, key: str, owner: str, ttl: float) -> None:
        super().__init__(protocol.backend, key, owner, ttl)
        self.protocol = protocol
        self.max_delay = protocol.poll_interval
        self.seen: Outcome | None = None
        self.in_doubt = False

    def try_acquire(self) -> Lease | None:
        """Grant the key if it is free; else remember the holder."""
        self.in_doubt = True  # until the store answers, a grant may have been made
        with self.backend.reaching(self.key):
            outcome = self.protocol.store.grant(self.key, self.owner, self.token, self.ttl)
        self.in_doubt = False
        if outcome.granted is not None:
            return self.protocol.lease(self.key, self.owner, self.ttl, outcome.granted)
        self.seen = outcome
        return None

    def cancel(self) -> None:
        """Delete a grant this attempt may have made without hearing about it."""
        if not self.in_doubt:
            return
        try:
            self.protocol.store.forget(self.key, self.token, self.ttl)
        except Exception:  # the error being raised already says what went wrong
            logger.warning("could not clear a possible grant of %r", self.key, exc_info=True)

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last try saw and its seconds left, for the error."""
        if self.seen is None or self.seen.holder is None:
            with self.backend.reaching(self.key):
                found = self.protocol.store.holder(self.key)
            if found is None:
                return None, None
            entry, now = found
        else:
            entry, now = self.seen.holder, self.seen.now_us
        return _holder(entry), max(0.0, (entry.expires_us - now) / 1e6)
