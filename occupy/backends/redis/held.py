"""The Lua scripts of occupy's Redis lock protocol that work on a grant or a waiter
already made: release, extend, resume, takeover, cancel (the scripts that take a key,
the shared prelude and the key layout they all follow are in :mod:`.scripts`)."""

from __future__ import annotations

from occupy.backends.redis.scripts import PRELUDE, QUEUE_STEPS

__all__ = ["CANCEL", "EXTEND", "RELEASE", "RESUME", "TAKEOVER"]


#: For the scripts that give a level back: undo one level of a held lease (``held`` is
#: its value), keeping its expiry; false if it has only one, which the caller deletes.
_UNWIND = """
local function unwind(token, held)
  local flag, depth, rest = string.match(held, '^%S+ (.)(%d+) (.*)$')
  if depth == '1' then return false end
  redis.call('SET', lock, token .. ' ' .. flag .. (tonumber(depth) - 1) .. ' ' .. rest,
             'KEEPTTL')
  return true
end
"""

#: Undo one level of a lease; on the last, delete it and hand the key to the next waiter.
#: ARGV: token. Returns 0 if the token does not hold the key, 1 when released, 2 when
#: one of several levels was undone.
RELEASE = (
    PRELUDE
    + """
local token = ARGV[1]
local held = redis.pcall('GET', lock)  -- another type (WRONGTYPE) is not ours either
local n = #token
-- Bytes, not substrings: a released lock is the common case, and comparing bytes
-- makes no new strings. 32, 45 and 49 are ' ', '-' and '1'.
if type(held) ~= 'string' or string.find(held, token, 1, true) ~= 1
    or string.byte(held, n + 1) ~= 32 then
  return 0
end
local no_waiters, one, space = string.byte(held, n + 2, n + 4)
if no_waiters == 45 and one == 49 and space == 32 then
  redis.call('DEL', lock)
  return 1
end
"""
    + _UNWIND
    + """
if unwind(token, held) then return 2 end
redis.call('DEL', lock)
"""
    + QUEUE_STEPS
    + """
grant_next(redis.call('TIME'))
return 1
"""
)

#: Set a held lease to expire ttl ms after the server's now. ARGV: token, ttl ms.
#: Returns the new expiry in ms, or nil if the token does not hold the key.
EXTEND = (
    PRELUDE
    + """
local token, ttl = ARGV[1], tonumber(ARGV[2])
if bad_ttl(ttl) then return redis.error_reply('occupy: ttl must be positive ms') end
local held = redis.pcall('GET', lock)  -- another type (WRONGTYPE) is not ours
if type(held) ~= 'string' then return nil end
local head, since, tail = string.match(held, '^(%S+ %S+ %d+) %d+ (%d+) (.*)$')
if not head or string.sub(head, 1, #token + 1) ~= token .. ' ' then return nil end
local t = redis.call('TIME')
local expires = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000) + ttl)
redis.call('SET', lock, head .. ' ' .. expires .. ' ' .. since .. ' ' .. tail, 'PXAT', expires)
return expires
"""
)

#: Return the lease a token holds, a level deeper if asked (re-entry by the context that
#: holds it), its expiry at least ttl ms after the server's now (never shortened). ARGV:
#: token, ttl ms, levels (0 or 1). Returns ``"<fence> <expires ms> <depth> <owner>\\0<key>"``,
#: or nil if the token does not hold the key.
RESUME = (
    PRELUDE
    + """
local token, ttl, levels = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if bad_ttl(ttl) then return redis.error_reply('occupy: ttl must be positive ms') end
local held = redis.pcall('GET', lock)  -- another type (WRONGTYPE) is not ours
if type(held) ~= 'string' or string.sub(held, 1, #token + 1) ~= token .. ' ' then
  return nil
end
local flag, depth, fence, expires, since, tail =
  string.match(held, '^%S+ (.)(%d+) (%d+) (%d+) (%d+) (.*)$')
depth = tonumber(depth) + levels
local t = redis.call('TIME')
local later = t[1] * 1000 + math.floor(t[2] / 1000) + ttl
local value = token .. ' ' .. flag .. depth .. ' ' .. fence .. ' '
if later > tonumber(expires) then
  expires = string.format('%d', later)
  redis.call('SET', lock, value .. expires .. ' ' .. since .. ' ' .. tail, 'PXAT', expires)
else
  redis.call('SET', lock, value .. expires .. ' ' .. since .. ' ' .. tail, 'KEEPTTL')
end
return fence .. ' ' .. expires .. ' ' .. depth .. ' ' .. tail
"""
)

#: Grant the key to a new token now, whoever holds it, with a higher fence (takeover).
#: ARGV: token, ``"<owner>\\0<key>"``, ttl ms, and the fence the holder must have (a
#: conditional takeover) or ``""``. Queued waiters keep their places (the flag stays
#: ``q``; a queue occupy did not write, of another type, is deleted); the old holder's
#: pending wake-up, if a release had just handed the key to it, is dropped, so that it
#: queues again instead of taking a lease that is no longer its own. Returns ``{"<fence>
#: <expires ms> <since ms>", old value without its token or false}`` (false too for a
#: value occupy did not write, which is replaced). A conditional takeover whose holder
#: has another fence (a value occupy did not write has fence 0, as ``holder()`` reports
#: it) or that finds the key free changes nothing and returns ``{false, old value
#: without its token, or false if free, or "?" and the value's PTTL for a value occupy
#: did not write, the server's now in ms}``.
TAKEOVER = (
    PRELUDE
    + QUEUE_STEPS
    + """
local token, tail, ttl, if_fence = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
if bad_ttl(ttl) then return redis.error_reply('occupy: ttl must be positive ms') end
local held = redis.pcall('GET', lock)
local previous = false
-- A value occupy did not write (another type, another layout) is simply replaced.
local old_token, fence
if type(held) == 'string' then
  old_token, fence = string.match(held, '^(%S+) %S+ (%d+) %d+ %d+ ')
end
if if_fence ~= '' then
  if held and not old_token then fence = '0' end
  if fence ~= if_fence then  -- both written with '%d': text compares exactly
    local t = redis.call('TIME')
    local now_ms = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000))
    if old_token then return {false, string.sub(held, #old_token + 2), now_ms} end
    if not held then return {false, false, now_ms} end
    return {false, '?', now_ms, redis.call('PTTL', lock)}
  end
end
if old_token then
  previous = string.sub(held, #old_token + 2)
  redis.call('DEL', base .. 'wake:' .. old_token)
end
-- A queue occupy did not write is deleted here (its waiters, if any, queue again).
if queue_trouble() then redis.call('DEL', queue, waiters) end
local flag = '-'
if redis.call('EXISTS', queue) == 1 then flag = 'q' end
-- The new fence is above the replaced holder's too, whatever the counter says (a
-- counter occupy did not write is rewritten here, not refused).
local floor = false
if old_token then
  floor = string.match(fence, '^0*(%d+)$')
  if not fence_text(floor) then floor = MAX_FENCE end  -- refused by next_fence
end
return {grant(token, flag, ttl, tail, redis.call('TIME'), floor, true), previous}
"""
)

#: Remove every trace of an attempt that gives up: its place in the queue, its wake-up
#: list, and the key itself if it was handed over meanwhile (then to the next waiter).
#: ARGV: token.
CANCEL = (
    PRELUDE
    + QUEUE_STEPS
    + _UNWIND
    + """
local token = ARGV[1]
leave_queue(token)
redis.call('DEL', wake .. token)
local held = redis.pcall('GET', lock)  -- another type (WRONGTYPE) is not ours
if type(held) == 'string' and string.sub(held, 1, #token + 1) == token .. ' ' then
  -- Handed to us and re-entered meanwhile (by its token): only our level goes.
  if unwind(token, held) then return 1 end
  redis.call('DEL', lock)
  held = false
end
if not held and redis.call('EXISTS', queue) == 1 then
  grant_next(redis.call('TIME'))
end
return 1
"""
)
