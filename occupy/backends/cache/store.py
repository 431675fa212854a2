"""The lock on a Django cache without the Redis protocol: entries taken with ``add``.

:class:`CacheStore` reads and writes a key's entry through ``add``, ``get``, ``set``
and ``delete`` (the whole of Django's cache API), with the safety margin its docstring
explains; :class:`~occupy.backends.cache.add.AddCacheBackend` is the backend on it.
What this path guarantees, and what it cannot:

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

from occupy.backends.claims import Entry, digest, now_us
from occupy.validation import MAX_FENCE

__all__ = [
    "FENCE_MEMORY_MS",
    "PREFIX",
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
