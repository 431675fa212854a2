"""The Redis side of :class:`~occupy.backends.cache.CacheBackend`: one Lua script per step.

Used when the cache is django-redis or Django's own ``RedisCache``: each step reads and
writes on the server in one script, so release and extend compare the token
atomically, the fence is taken in the same script as the grant, and every time is the
Redis server's ``TIME``. A key's entry is a hash (token, owner, fence, depth, expires,
since, key) that Redis expires itself; its fence counter sits beside it.

Numbers go to ``redis.call`` as ``%d`` strings: Redis turns a Lua number into text with
14 significant digits, which would round a fence (microseconds since the epoch).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from occupy.backends.claims import Entry, digest
from occupy.backends.claims import text as _text  # replies: bytes or str

__all__ = ["LuaStore", "Names", "Outcome"]

#: How long a key's fence counter outlives its last grant. Fences are floored by the
#: clock, so a counter that expired only matters if the clock steps back meanwhile.
FENCE_MEMORY_MS = 24 * 3600 * 1000

#: KEYS: entry, fence counter. ARGV: token, owner, ttl ms, key.
#: Returns one NUL-separated string (one bulk reply parses faster than an array):
#: ``g fence expires`` (granted) or ``h fence expires now since owner`` (held, whoever
#: by: owners do not re-enter, see ``occupy.reentry``); times in ms.
_READ = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HMGET', KEYS[1], 'token', 'owner', 'fence', 'since', 'expires')
"""
#: Write the grant: the entry with the next fence (``f``) and expiry (``at``).
_GRANT = """
local floor = tonumber(t[1]) * 1000000 + tonumber(t[2])
local f = string.format('%d', math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, floor))
redis.call('SET', KEYS[2], f, 'PX', FENCE_MEMORY_MS)
local at = string.format('%d', now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'owner', ARGV[2], 'fence', f, 'depth', 1,
           'expires', at, 'since', string.format('%d', now), 'key', ARGV[4])
redis.call('PEXPIREAT', KEYS[1], at)
""".replace("FENCE_MEMORY_MS", str(FENCE_MEMORY_MS))
ACQUIRE = _READ + """
if cur[1] then
  return 'h\\0' .. cur[3] .. '\\0' .. cur[5] .. '\\0' .. string.format('%d', now)
         .. '\\0' .. cur[4] .. '\\0' .. cur[2]
end
""" + _GRANT + """
return 'g\\0' .. f .. '\\0' .. at
"""

#: KEYS and ARGV as :data:`ACQUIRE`: grant the key whoever holds it, with a higher fence
#: (takeover). Returns ``g fence expires`` followed, if the key was held, by
#: ``fence expires since owner`` of the holder it replaced.
TAKEOVER = _READ + _GRANT + """
local reply = 'g\\0' .. f .. '\\0' .. at
if cur[1] then
  reply = reply .. '\\0' .. cur[3] .. '\\0' .. cur[5] .. '\\0' .. cur[4] .. '\\0' .. cur[2]
end
return reply
"""

#: KEYS: entry. ARGV: token. Returns -1 (not held), 0 (released) or the depth left.
RELEASE = """
local cur = redis.call('HMGET', KEYS[1], 'token', 'depth')
if cur[1] ~= ARGV[1] then
  return -1
end
local depth = tonumber(cur[2])
if depth > 1 then
  redis.call('HSET', KEYS[1], 'depth', depth - 1)
  return depth - 1
end
redis.call('DEL', KEYS[1])
return 0
"""

#: KEYS: entry. ARGV: token, ttl ms. Returns the new expiry in ms, or -1 if not held.
EXTEND = """
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return -1
end
local t = redis.call('TIME')
local at = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
                         + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], 'expires', at)
redis.call('PEXPIREAT', KEYS[1], at)
return at
"""

#: KEYS: entry. ARGV: token, ttl ms, levels (0 or 1). Add the levels to the token's
#: grant and keep it at least ttl ms more (never shortened). Returns
#: ``{owner, fence, expires ms, depth}``, or nil if the token does not hold the key.
RESUME = """
local cur = redis.call('HMGET', KEYS[1], 'token', 'owner', 'fence', 'depth', 'expires')
if cur[1] ~= ARGV[1] then
  return false
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local depth = tonumber(cur[4]) + tonumber(ARGV[3])
local at = string.format('%d', math.max(tonumber(cur[5]), now + tonumber(ARGV[2])))
redis.call('HSET', KEYS[1], 'depth', depth, 'expires', at)
redis.call('PEXPIREAT', KEYS[1], at)
return {cur[2], cur[3], at, depth}
"""

#: KEYS: entry. Returns {owner, fence, expires ms, now ms, since ms}, or nil when nobody
#: holds it.
HOLDER = """
local cur = redis.call('HMGET', KEYS[1], 'owner', 'fence', 'expires', 'since')
if not cur[1] then
  return false
end
local t = redis.call('TIME')
return {cur[1], cur[2], cur[3], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
        cur[4]}
"""

#: KEYS: entry. ARGV: token. Delete the entry if this token holds it (a cancelled grant).
FORGET = """
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

class Names(NamedTuple):
    """The cache names of a key's entry and of its fence counter."""

    entry: str
    fence: str


class Outcome(NamedTuple):
    """What a grant attempt found: the grant, or the entry that holds the key."""

    granted: Entry | None
    holder: Entry | None
    now_us: int


def names(key: str) -> Names:
    """Return the cache names of ``key``'s entry and fence counter (before the cache's
    own ``make_key``). The ``{…}`` hash tag keeps both in one Redis Cluster slot."""
    d = digest(key)
    return Names(f"occupy:{{{d}}}:lock", f"occupy:{{{d}}}:fence")


class LuaStore:
    """Every step of the lock one Lua script on the cache's Redis server."""

    atomic = True

    def __init__(self, client: Any, make_key: Callable[[str], Any]) -> None:
        self.client = client
        self.make_key = make_key
        self._acquire = client.register_script(ACQUIRE)
        self._release = client.register_script(RELEASE)
        self._extend = client.register_script(EXTEND)
        self._resume = client.register_script(RESUME)
        self._takeover = client.register_script(TAKEOVER)
        self._holder = client.register_script(HOLDER)
        self._forget = client.register_script(FORGET)
        self._keys: dict[str, list[str]] = {}

    def keys(self, key: str) -> list[str]:
        """Return the raw Redis keys of ``key``'s entry and fence counter."""
        keys = self._keys.get(key)
        if keys is None:
            entry, fence = names(key)
            keys = [str(self.make_key(entry)), str(self.make_key(fence))]
            if len(self._keys) >= 4096:  # a bound, not an LRU: hot keys come back at once
                self._keys.clear()
            self._keys[key] = keys
        return keys

    def grant(self, key: str, owner: str, token: str, ttl: float) -> Outcome:
        """Grant ``key`` if it is free, else report who holds it."""
        reply = self._acquire(self.keys(key), [token, owner, _ms(ttl), key])
        kind, fence, expires, *rest = reply.split(b"\0", 5)
        if kind == b"g":
            return Outcome(Entry(token, owner, int(fence), 1, int(expires) * 1000, 0, key),
                           None, 0)
        now, since, holder = rest
        entry = Entry("", holder.decode("utf-8"), int(fence), 0, int(expires) * 1000,
                      int(since) * 1000, key)
        return Outcome(None, entry, int(now) * 1000)

    def takeover(self, key: str, owner: str, token: str,
                 ttl: float) -> tuple[Entry, Entry | None]:
        """Grant ``key`` to ``token`` whoever holds it, with a higher fence; return the
        grant and the entry it replaced (without its token), if any."""
        reply = self._takeover(self.keys(key), [token, owner, _ms(ttl), key])
        _g, fence, expires, *old = reply.split(b"\0", 6)
        entry = Entry(token, owner, int(fence), 1, int(expires) * 1000, 0, key)
        if not old:
            return entry, None
        old_fence, old_expires, old_since, old_owner = old
        return entry, Entry("", old_owner.decode("utf-8"), int(old_fence), 0,
                            int(old_expires) * 1000, int(old_since) * 1000, key)

    def release(self, key: str, token: str, ttl: float) -> int:
        """Undo one level of ``token``'s grant: -1 if not held, else the depth left."""
        return int(self._release(self.keys(key)[:1], [token]))

    def extend(self, key: str, token: str, ttl: float) -> int | None:
        """Move the grant's expiry to ``ttl`` after the server's now; ``None`` if not held."""
        expires = int(self._extend(self.keys(key)[:1], [token, _ms(ttl)]))
        return None if expires < 0 else expires * 1000

    def resume(self, key: str, token: str, ttl: float, levels: int) -> Entry | None:
        """Add ``levels`` to ``token``'s grant and keep it at least ``ttl`` more; return
        the entry, or ``None`` if the token does not hold ``key``."""
        reply = self._resume(self.keys(key)[:1], [token, _ms(ttl), levels])
        if not reply:
            return None
        owner, fence, expires, depth = reply
        return Entry(token, _text(owner), int(fence), int(depth), int(expires) * 1000, 0, key)

    def holder(self, key: str) -> tuple[Entry, int] | None:
        """Return the entry holding ``key`` (without its token) and the server's now."""
        reply = self._holder(self.keys(key)[:1])
        if not reply:
            return None
        owner, fence, expires, now, since = reply
        entry = Entry("", _text(owner), int(fence), 0, int(expires) * 1000, int(since) * 1000, key)
        return entry, int(now) * 1000

    def is_held(self, key: str, token: str) -> bool:
        """Return whether ``token`` holds ``key`` (Redis drops expired entries itself)."""
        return _text(self.client.hget(self.keys(key)[0], "token") or b"") == token

    def forget(self, key: str, token: str, ttl: float) -> None:
        """Delete ``key``'s entry if ``token`` holds it."""
        self._forget(self.keys(key)[:1], [token])

    def entries(self) -> Iterator[Entry]:
        """Yield every live entry (SCAN over the entries' names; tokens left out)."""
        pattern = str(self.make_key("occupy:{*}:lock"))
        fields = ("owner", "fence", "depth", "expires", "since", "key")
        batch: list[bytes] = []
        for name in self.client.scan_iter(match=pattern, count=1000):
            batch.append(name)
            if len(batch) == 500:
                yield from self._read(batch, fields)
                batch = []
        yield from self._read(batch, fields)

    def _read(self, batch: list[bytes], fields: tuple[str, ...]) -> Iterator[Entry]:
        pipe = self.client.pipeline(transaction=False)
        for name in batch:
            pipe.hmget(name, fields)
        for owner, fence, depth, expires, since, key in pipe.execute():
            if owner is not None:  # expired between the scan and the read
                yield Entry("", _text(owner), int(fence), int(depth), int(expires) * 1000,
                            int(since) * 1000, _text(key))


def _ms(seconds: float) -> int:
    """Return ``seconds`` as whole milliseconds, rounded up (a lease never ends early)."""
    return max(1, math.ceil(seconds * 1000))
