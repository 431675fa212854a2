"""The Lua scripts of :class:`~occupy.backends.redis.RedisBackend`, as named constants.

Every script takes the same five keys, all under one hash tag (one Redis Cluster slot):

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
5. ``wake``: the prefix of each waiter's wake-up list (``wake<token>``), on which the
   waiter blocks with ``BLPOP``. Releasing hands the key straight to the oldest live
   waiter and pushes its fence and expiry there: the waiter needs no further round
   trip, and a process that re-takes the key in a loop cannot overtake the queue.
   A list holds at most one element and expires with ``QUEUE_TTL``.

Times are the server's: ``TIME`` for now, ``PEXPIREAT`` for expiry. Big integers go
through ``string.format('%d')`` because Lua numbers are doubles (exact below 2^53;
fences in microseconds are about 2^51) and their default formatting rounds.
"""

from __future__ import annotations

__all__ = ["ACQUIRE", "CANCEL", "EXTEND", "RELEASE"]

_COMMON = """
if redis.replicate_commands then redis.replicate_commands() end
local lock, fence_key, queue, waiters, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local function fmt(n) return string.format('%d', n) end

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Never below the server's clock: a restart that lost the counter cannot go back.
local function next_fence(now_us, fence_ttl)
  local last = tonumber(redis.call('GET', fence_key) or '0')
  local fence = math.max(last + 1, now_us)
  redis.call('SET', fence_key, fmt(fence), 'PX', fence_ttl)
  return fence
end

local function grant(token, owner, ttl, now_us, key, fence_ttl)
  local fence = next_fence(now_us, fence_ttl)
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
local function grant_next(now_us, key, fence_ttl, queue_ttl)
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
        local fence, expires = grant(head, owner, tonumber(ttl), now_us, key, fence_ttl)
        local list = wake .. head
        redis.call('DEL', list)
        redis.call('RPUSH', list, fmt(fence) .. '|' .. fmt(expires))
        redis.call('PEXPIRE', list, queue_ttl)
        return head
      end
    end
  end
end
"""

#: Take, re-enter or queue for a key.
#: ARGV: token, owner, ttl ms, mode, key, fence ttl ms, queue ttl ms. Mode ``try``
#: does not queue; ``enqueue`` joins the queue, ``wait`` keeps the place (re-joining
#: at the back if the place was lost). Returns ``{1, token, fence, expires ms, depth}``
#: when granted, else ``{0, owner, fence, expires ms, now ms}`` of the holder.
ACQUIRE = _COMMON + """
local token, owner, ttl, mode, key = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local fence_ttl, queue_ttl = tonumber(ARGV[6]), tonumber(ARGV[7])
if not ttl or ttl <= 0 then return redis.error_reply('occupy: ttl must be positive') end
local now_us = clock()
local fields = {'token', 'owner', 'fence', 'expires', 'depth'}
local held = redis.call('HMGET', lock, unpack(fields))
if not held[1] and redis.call('EXISTS', queue) == 1 then
  -- Free, but others queued first (the holder expired, or a waiter gave up).
  grant_next(now_us, key, fence_ttl, queue_ttl)
  held = redis.call('HMGET', lock, unpack(fields))
end
if not held[1] then
  local fence, expires = grant(token, owner, ttl, now_us, key, fence_ttl)
  return {1, token, fmt(fence), fmt(expires), 1}
end
if held[1] == token then
  -- Handed over on a release; the wake-up it pushed is no longer needed.
  leave_queue(token)
  redis.call('DEL', wake .. token)
  return {1, token, held[3], held[4], tonumber(held[5])}
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
  return {1, held[1], held[3], fmt(expires), depth}
end
if mode ~= 'try' then
  redis.call('ZADD', queue, 'NX', fmt(now_us), token)
  redis.call('HSET', waiters, token, fmt(now_ms + queue_ttl) .. '|' .. fmt(ttl) .. '|' .. owner,
             'key', key)
  redis.call('PEXPIRE', queue, queue_ttl)
  redis.call('PEXPIRE', waiters, queue_ttl)
end
return {0, held[2], held[3], held[4], fmt(now_ms)}
"""

#: Undo one level of a lease; on the last, delete it and hand the key to the next waiter.
#: ARGV: token, key, fence ttl ms, queue ttl ms. Returns 0 if the token does not hold
#: the key, 1 when released, 2 when one of several levels was undone.
RELEASE = _COMMON + """
local token = ARGV[1]
local held = redis.call('HMGET', lock, 'token', 'depth')
if held[1] ~= token then return 0 end
if tonumber(held[2]) > 1 then
  redis.call('HINCRBY', lock, 'depth', -1)
  return 2
end
redis.call('DEL', lock)
if redis.call('EXISTS', queue) == 1 then
  grant_next(clock(), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
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
#: ARGV: token, key, fence ttl ms, queue ttl ms.
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
  grant_next(clock(), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
end
return 1
"""
