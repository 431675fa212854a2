"""The Lua scripts of :class:`~occupy.backends.redis.RedisBackend`, as named constants,
and the layout of Redis keys they share with the Python side (:func:`redis_keys`).

Every script is given one key, the lock's, and works on the keys that share its hash
tag (so one Redis Cluster slot): ``<prefix>{<digest>}:`` followed by

1. ``lock``: a hash ``{token, owner, depth, fence, expires, since, key}`` that Redis
   expires at ``expires`` (``PEXPIREAT``); absent means free.
2. ``fence``: the last fence handed out for the key. It outlives releases (it expires
   only ``FENCE_TTL`` after the last grant), and every new fence is at least the
   server's ``TIME`` in microseconds, so fences rise across restarts without
   persistence and after the counter itself expired.
3. ``queue``: a sorted set of waiters' tokens, scored by arrival (``TIME`` µs).
4. ``waiters``: a hash ``token -> "<deadline ms>|<ttl ms>|<owner>"`` (plus ``key``). A
   waiter refreshes its deadline every time it polls; one that died is dropped when
   its deadline passes, so it never blocks the key for longer than ``QUEUE_TTL``.
5. ``wake:<token>``: each waiter's wake-up list, on which the
   waiter blocks with ``BLPOP``. Releasing hands the key straight to the oldest live
   waiter and pushes its fence and expiry there: the waiter needs no further round
   trip, and a process that re-takes the key in a loop cannot overtake the queue.
   A list holds at most one element and expires with ``QUEUE_TTL``.

Redis Cluster routes a script by its declared key and lets it touch undeclared keys of
the same slot, which the shared hash tag guarantees. Needs Redis 6.2 (``SET … GET``).

Times are the server's: ``TIME`` for now, ``PEXPIREAT`` for expiry. Big integers go
through ``string.format('%d')`` because Lua numbers are doubles (exact below 2^53;
fences in microseconds are about 2^51) and their default formatting rounds.

``FENCE_TTL`` and ``QUEUE_TTL`` (milliseconds) are written into the text by
:func:`scripts_for`, so each call sends only what changes: fewer arguments to encode
is most of what an uncontended lock can save.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import NamedTuple

__all__ = ["ACQUIRE", "CANCEL", "EXTEND", "RELEASE", "RedisKeys", "redis_keys", "scripts_for"]


class RedisKeys(NamedTuple):
    """The Redis keys of one lock key; one hash tag, so one Redis Cluster slot."""

    lock: str
    fence: str
    queue: str
    waiters: str
    wake: str


@lru_cache(maxsize=4096)
def redis_keys(prefix: str, key: str) -> RedisKeys:
    """Return the Redis keys of lock ``key``.

    The hash tag is a digest of the key, so that a key holding ``{`` or ``}`` (or any
    other text) still puts all its Redis keys in one slot.
    """
    base = f"{prefix}{{{hashlib.sha256(key.encode('utf-8')).hexdigest()[:32]}}}:"
    return RedisKeys(f"{base}lock", f"{base}fence", f"{base}queue", f"{base}waiters",
                     f"{base}wake:")


_COMMON = """
local FENCE_TTL, QUEUE_TTL = @FENCE_TTL@, @QUEUE_TTL@
local lock = KEYS[1]
local base = string.sub(lock, 1, -5)
local fence_key, queue, waiters, wake = base .. 'fence', base .. 'queue', base .. 'waiters',
  base .. 'wake:'

local function fmt(n) return string.format('%d', n) end

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Never below the server's clock: a restart that lost the counter cannot go back. The
-- clock is almost always ahead of the counter, so one SET ... GET usually does it.
local function next_fence(now_us)
  local last = tonumber(redis.call('SET', fence_key, fmt(now_us), 'PX', FENCE_TTL, 'GET') or '0')
  if last < now_us then return now_us end
  redis.call('SET', fence_key, fmt(last + 1), 'PX', FENCE_TTL)
  return last + 1
end

local function grant(token, owner, ttl, now_us, key)
  local fence = next_fence(now_us)
  local now_ms = math.floor(now_us / 1000)
  local expires = now_ms + ttl
  redis.call('HSET', lock, 'token', token, 'owner', owner, 'depth', '1', 'fence', fmt(fence),
             'expires', fmt(expires), 'since', fmt(now_ms), 'key', key)
  redis.call('PEXPIREAT', lock, fmt(expires))
  return fence, expires
end

local function leave_queue(token)
  redis.call('ZREM', queue, token)
  redis.call('HDEL', waiters, token)
  if redis.call('EXISTS', queue) == 0 then redis.call('DEL', waiters) end
end

-- The key is free: hand it to the oldest waiter whose deadline has not passed, and
-- push the grant to its wake-up list. Dead waiters met on the way are dropped.
local function grant_next(now_us, key)
  local now_ms = math.floor(now_us / 1000)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      redis.call('DEL', waiters)
      return nil
    end
    local info = redis.call('HGET', waiters, head)
    leave_queue(head)
    if info then
      local deadline, ttl, owner = string.match(info, '^(%d+)|(%d+)|(.*)$')
      if tonumber(deadline) > now_ms then
        local fence, expires = grant(head, owner, tonumber(ttl), now_us, key)
        local list = wake .. head
        redis.call('DEL', list)
        redis.call('RPUSH', list, fmt(fence) .. '|' .. fmt(expires))
        redis.call('PEXPIRE', list, QUEUE_TTL)
        return head
      end
    end
  end
end
"""

#: Take, re-enter or queue for a key.
#: ARGV: token, owner, ttl ms, mode, key. Mode ``try``
#: does not queue; ``enqueue`` joins the queue, ``wait`` keeps the place (re-joining
#: at the back if the place was lost). A grant is one status line (``"<fence> <expires
#: ms> <depth> <token>"``, digits and hex only), which a client parses far faster than
#: an array; a refusal is ``{owner, fence, expires ms, now ms}`` of the holder.
ACQUIRE = _COMMON + """
local token, owner, ttl, mode, key = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local function granted(fence, expires, depth, by)
  return redis.status_reply(fence .. ' ' .. expires .. ' ' .. depth .. ' ' .. by)
end
if not ttl or ttl <= 0 then return redis.error_reply('occupy: ttl must be positive') end
local now_us = clock()
local fields = {'token', 'owner', 'fence', 'expires', 'depth'}
local held = redis.call('HMGET', lock, unpack(fields))
if not held[1] and redis.call('EXISTS', queue) == 1 then
  -- Free, but others queued first (the holder expired, or a waiter gave up).
  grant_next(now_us, key)
  held = redis.call('HMGET', lock, unpack(fields))
end
if not held[1] then
  local fence, expires = grant(token, owner, ttl, now_us, key)
  return granted(fmt(fence), fmt(expires), 1, token)
end
if held[1] == token then
  -- Handed over on a release; the wake-up it pushed is no longer needed.
  leave_queue(token)
  redis.call('DEL', wake .. token)
  return granted(held[3], held[4], held[5], token)
end
local now_ms = math.floor(now_us / 1000)
if held[2] == owner then
  -- Re-entry: one level deeper, same token and fence, expiry never shortened.
  local depth = redis.call('HINCRBY', lock, 'depth', 1)
  local expires = math.max(tonumber(held[4]), now_ms + ttl)
  if expires > tonumber(held[4]) then
    redis.call('HSET', lock, 'expires', fmt(expires))
    redis.call('PEXPIREAT', lock, fmt(expires))
  end
  if mode ~= 'try' then leave_queue(token) end
  return granted(held[3], fmt(expires), depth, held[1])
end
if mode ~= 'try' then
  redis.call('ZADD', queue, 'NX', fmt(now_us), token)
  redis.call('HSET', waiters, token, fmt(now_ms + QUEUE_TTL) .. '|' .. fmt(ttl) .. '|' .. owner,
             'key', key)
  redis.call('PEXPIRE', queue, QUEUE_TTL)
  redis.call('PEXPIRE', waiters, QUEUE_TTL)
end
return {held[2], held[3], held[4], fmt(now_ms)}
"""

#: Undo one level of a lease; on the last, delete it and hand the key to the next waiter.
#: ARGV: token. Returns 0 if the token does not hold the key, 1 when released, 2 when
#: one of several levels was undone.
RELEASE = _COMMON + """
local held = redis.call('HMGET', lock, 'token', 'depth')
if held[1] ~= ARGV[1] then return 0 end
if held[2] ~= '1' then
  redis.call('HINCRBY', lock, 'depth', -1)
  return 2
end
if redis.call('EXISTS', queue) == 1 then
  local key = redis.call('HGET', lock, 'key')
  redis.call('DEL', lock)
  grant_next(clock(), key)
else
  redis.call('DEL', lock)
end
return 1
"""

#: Set a held lease to expire ttl ms after the server's now. ARGV: token, ttl ms.
#: Returns the new expiry in ms, or nil if the token does not hold the key.
EXTEND = _COMMON + """
local token, ttl = ARGV[1], tonumber(ARGV[2])
if not ttl or ttl <= 0 then return redis.error_reply('occupy: ttl must be positive') end
if redis.call('HGET', lock, 'token') ~= token then return nil end
local expires = math.floor(clock() / 1000) + ttl
redis.call('HSET', lock, 'expires', fmt(expires))
redis.call('PEXPIREAT', lock, fmt(expires))
return fmt(expires)
"""

#: Remove every trace of an attempt that gives up: its place in the queue, its wake-up
#: list, and the key itself if it was handed over meanwhile (then to the next waiter).
#: ARGV: token, key.
CANCEL = _COMMON + """
local token = ARGV[1]
leave_queue(token)
redis.call('DEL', wake .. token)
local holder = redis.call('HGET', lock, 'token')
if holder == token then
  redis.call('DEL', lock)
  holder = false
end
if not holder and redis.call('EXISTS', queue) == 1 then
  grant_next(clock(), ARGV[2])
end
return 1
"""


def scripts_for(fence_ttl_ms: int, queue_ttl_ms: int) -> dict[str, str]:
    """Return the four scripts by name, with a backend's TTLs written in."""
    def fill(text: str) -> str:
        return text.replace("@FENCE_TTL@", str(int(fence_ttl_ms))).replace(
            "@QUEUE_TTL@", str(int(queue_ttl_ms)))

    return {"acquire": fill(ACQUIRE), "release": fill(RELEASE), "extend": fill(EXTEND),
            "cancel": fill(CANCEL)}
