"""The Lua scripts of occupy's Redis lock protocol that take a key (those on a grant or
a waiter already made are in :mod:`.held`), as named constants, and the layout of Redis
keys all of them share with the Python side (:func:`~.keys.redis_keys`). They are the
one Redis protocol: :class:`~occupy.backends.redis.RedisBackend` and
:class:`~occupy.backends.cache.CacheBackend` on a Redis cache both run them: both are
a :class:`~occupy.backends.redis.protocol.RedisLockBackend`.

Every script is given one key, the lock's, and works on the keys that share its hash
tag (so one Redis Cluster slot): ``<prefix>{<digest>}:`` followed by

1. ``lock``: a string ``"<token> <flag><depth> <fence> <expires ms> <since ms>
   <owner>\\0<key>"`` that Redis expires with the lease (``PXAT``); absent means free.
   ``flag`` is ``q`` once a waiter has queued behind this holder, else ``-``, so a
   release needs no look at the queue unless someone waits. One string, read with
   one ``GET`` and written with one ``SET``, costs the server far less than a hash.
2. ``fence``: the last fence handed out for the key. Every new fence is the server's
   ``TIME`` in microseconds, or one above the last if that is ahead (a clock stepped
   back, two grants in one microsecond). So fences rise across releases and expiry,
   and also when the counter is lost or set back: a restart without persistence, a
   restore of an older snapshot, a failover to a replica that lagged. The counter
   lives ``FENCE_TTL`` from its first grant; after that the clock alone floors it.
   Fences are decimal text in the scripts, compared (longer is larger, else byte
   order) and counted (one added digit by digit) exactly, up to 2^63 - 1. A counter
   occupy did not write (not a decimal, another type) refuses every grant with an
   error naming the Redis key, and a takeover rewrites it (above the replaced holder's
   fence); a counter at 2^63 - 1 refuses every grant, takeovers included, until it is
   deleted by hand. No grant is ever made with a repeated or a negative fence.
3. ``queue``: a sorted set of waiters' tokens, scored by arrival (``TIME`` µs).
4. ``waiters``: a hash ``token -> "<deadline ms>|<ttl ms>|<owner>\\0<key>"``. A
   waiter refreshes its deadline every time it polls; one that died is dropped when
   its deadline passes, so it never blocks the key for longer than ``QUEUE_TTL``.
   A ``queue`` or ``waiters`` of another type (occupy did not write it) refuses every
   try that would queue, with an error naming the Redis key and the repair, releases
   hand nothing over, and a takeover deletes both (as it rewrites a bad fence counter).
5. ``wake:<token>``: each waiter's wake-up list, on which the waiter blocks with
   ``BLPOP``. Releasing hands the key straight to the oldest live waiter and pushes
   its fence, expiry and start there: the waiter needs no further round trip, and a
   process that re-takes the key in a loop cannot overtake the queue. A list holds at most
   one element and expires with ``QUEUE_TTL``.

A value under ``lock`` that occupy did not write (an older layout during a rolling
deploy, a prefix shared with another app: a string that does not parse, or another
type, which ``GET`` refuses with ``WRONGTYPE``) counts as held by an unknown holder
until Redis expires it, never as free: take refuses it, and no token releases or
extends it. The scripts read the key with ``pcall`` (no extra call) and parse it only
when it is present.

Redis Cluster routes a script by its declared key and lets it touch undeclared keys of
the same slot, which the shared hash tag guarantees. Needs Redis 6.2 (``SET … GET``,
``PXAT``).

Times are the server's: ``TIME`` for now, ``PXAT`` for expiry. Times go through
``string.format('%d')`` because Lua numbers are doubles (exact below 2^53; times in
microseconds are about 2^51) and their default formatting rounds; fences are never
numbers in Lua at all.

The uncontended path is what a lock is mostly asked for, so it is kept short: take is
``GET``, ``TIME``, ``EXISTS``, ``SET … GET`` (the fence) and ``SET … PXAT``; release is
``GET`` and ``DEL``. ``FENCE_TTL`` and ``QUEUE_TTL`` (milliseconds) are written into the text by
:func:`~.link.scripts_for`, and the caller's owner and key travel as one argument, so each
call sends only what changes.
"""

from __future__ import annotations

__all__ = ["ACQUIRE", "PRELUDE", "QUEUE", "QUEUE_STEPS"]


#: Names and helpers every script starts with. ``grant`` writes a holder and returns
#: ``"<fence> <expires ms> <since ms>"``, the start of a grant's reply.
PRELUDE = """
local FENCE_TTL, QUEUE_TTL = @FENCE_TTL@, @QUEUE_TTL@
local lock = KEYS[1]
local base = string.sub(lock, 1, -5)

-- A ttl in whole milliseconds, at least 1 and at most about 31 years. Lua's tonumber
-- also takes 'nan', 'inf', '0x10' and '0.5': each is refused before anything is written.
local function bad_ttl(ttl)
  return not ttl or ttl ~= ttl or ttl < 1 or ttl > 1e12 or ttl % 1 ~= 0
end

-- Fences are decimal text, compared and counted exactly: Lua numbers are doubles,
-- exact only below 2^53, and a counter set higher (a restore, a hand edit, another
-- program) must give neither a repeated nor a negative fence.
local MAX_FENCE = '9223372036854775807'
local function below(a, b)  -- a < b, for decimal texts without leading zeros
  if #a ~= #b then return #a < #b end
  return a < b
end
local function plus_one(n)
  local i = #n
  while i > 0 and string.byte(n, i) == 57 do i = i - 1 end  -- trailing nines
  if i == 0 then return '1' .. string.rep('0', #n) end
  return string.sub(n, 1, i - 1) .. string.char(string.byte(n, i) + 1) .. string.rep('0', #n - i)
end
local function fence_text(n)  -- n is a fence occupy could have written, as text
  return n == '0' or (string.find(n, '^[1-9]%d*$') and not below(MAX_FENCE, n))
end

-- The key's fence counter (false if it has none), or nil and why it cannot give the
-- next fence (FENCE_AT_MAX: never again; anything else: a takeover rewrites it).
local FENCE_AT_MAX = 'is at the largest fence, 2^63-1, and cannot rise'
local function last_fence(fence_key)
  local last = redis.pcall('GET', fence_key)
  if not last then return false end
  if type(last) ~= 'string' then
    return nil, 'is not a string (another type: WRONGTYPE)'
  end
  if not fence_text(last) then
    return nil, 'holds ' .. string.format('%q', string.sub(last, 1, 40)) ..
      ', which is not a fence occupy wrote'
  end
  if last == MAX_FENCE then return nil, FENCE_AT_MAX end
  return last
end

local function fence_error(fence_key, why)
  local fix = 'occupy.takeover() on the key rewrites it'
  if why == FENCE_AT_MAX then
    fix = 'delete it by hand; fences then restart from the server clock, below those ' ..
      'handed out, so storage that compares them must forget them too'
  end
  return 'occupy: fence counter ' .. fence_key .. ' ' .. why .. ': no fence can be ' ..
    'handed out for the key until it is repaired (' .. fix .. ')'
end

-- The next fence, as text: the server's clock in µs, or one above the last fence if
-- that is ahead (a clock stepped back, two grants in one µs), and above ``floor``
-- (a holder's fence) when given. ``repair`` (a takeover) rewrites a counter occupy did
-- not write instead of refusing. The counter keeps the TTL it was made with, so a key
-- in steady use is written with one SET and no expiry to rewrite.
local function next_fence(t, floor, repair)
  local fence_key = base .. 'fence'
  local last, why = last_fence(fence_key)
  if last == nil then
    if not repair or why == FENCE_AT_MAX then error({err = fence_error(fence_key, why)}) end
    redis.call('DEL', fence_key)
    last = false
  end
  local kept = last
  if floor and (not last or below(last, floor)) then last = floor end
  local fence = string.format('%d', t[1] * 1000000 + t[2])
  if last and not below(last, fence) then
    if last == MAX_FENCE or below(MAX_FENCE, last) then
      error({err = fence_error(fence_key, FENCE_AT_MAX)})
    end
    fence = plus_one(last)
  end
  if kept then
    redis.call('SET', fence_key, fence, 'KEEPTTL')
  else
    redis.call('SET', fence_key, fence, 'PX', FENCE_TTL)
  end
  return fence
end

local function grant(token, flag, ttl, tail, t, floor, repair)
  local fence = next_fence(t, floor, repair)
  local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
  local expires = now_ms + ttl
  local numbers = fence .. string.format(' %d %d', expires, now_ms)
  -- PXAT: an absolute expiry is stored and replicated as it is, with no rewriting.
  -- Redis turns a Lua number into text with '%.17g', exact for these 13 digits.
  redis.call('SET', lock, token .. ' ' .. flag .. '1 ' .. numbers .. ' ' .. tail,
             'PXAT', expires)
  return numbers
end
"""

#: The queue's helpers, for the scripts (or branches) that deal with waiters.
QUEUE_STEPS = """
local queue, waiters, wake = base .. 'queue', base .. 'waiters', base .. 'wake:'

-- The name and type of a queue key that holds what occupy did not write there (another
-- type: an older layout, a prefix shared with another app), or nil. No waiter can queue
-- while one does: the first try and a waiter refuse with queue_error, releases hand
-- nothing over, and a takeover deletes both keys (their waiters queue again).
local function queue_trouble()
  local kind = redis.call('TYPE', queue).ok
  if kind ~= 'zset' and kind ~= 'none' then return queue, kind, 'sorted set' end
  kind = redis.call('TYPE', waiters).ok
  if kind ~= 'hash' and kind ~= 'none' then return waiters, kind, 'hash' end
  return nil
end

local function check_queue()
  local name, kind, ours = queue_trouble()
  if name then
    error({err = 'occupy: queue key ' .. name .. ' is a ' .. kind .. ', not the ' .. ours ..
      ' of waiters occupy writes: nobody can wait for the key until it is repaired ' ..
      '(occupy.takeover() on the key deletes it, or delete it by hand)'})
  end
end

-- Tolerant of a queue of another type: nothing of ours is in it.
local function leave_queue(token)
  redis.pcall('ZREM', queue, token)
  redis.pcall('HDEL', waiters, token)
  if redis.call('EXISTS', queue) == 0 then redis.call('DEL', waiters) end
end

-- The key is free: hand it to the oldest waiter whose deadline has not passed, and
-- push the grant to its wake-up list. Dead waiters met on the way are dropped.
local function grant_next(t)
  -- A counter that cannot give a fence, or a queue occupy did not write: no hand-over
  -- (each waiter's own try reports it).
  if last_fence(base .. 'fence') == nil or queue_trouble() then return nil end
  local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      redis.call('DEL', waiters)
      return nil
    end
    local info = redis.call('HGET', waiters, head)
    leave_queue(head)
    if info then
      local deadline, ttl, tail = string.match(info, '^(%d+)|(%d+)|(.*)$')
      if tonumber(deadline) > now_ms then
        local flag = '-'
        if redis.call('EXISTS', queue) == 1 then flag = 'q' end
        local numbers = grant(head, flag, tonumber(ttl), tail, t)
        local list = wake .. head
        redis.call('DEL', list)
        redis.call('RPUSH', list, numbers)
        redis.call('PEXPIRE', list, QUEUE_TTL)
        return head
      end
    end
  end
end
"""

#: Take or queue for a key. ARGV: token, ``"<owner>\\0<key>"``, ttl ms. A holder with
#: the same owner is no exception: owners do not re-enter (see ``occupy.reentry``). The
#: queueing variant joins the queue when refused, or keeps the place it has there (its
#: arrival time stays; a place that was lost is taken again at the back) and refreshes
#: its deadline. A grant is one bulk string
#: ``"<fence> <expires ms> <since ms> <depth> <token>"``; a refusal is
#: ``{holder's value without its token, now ms}``, or ``{"", now ms, PTTL}`` when the
#: key holds a value occupy did not write (see the module docstring).
_TAKE = """
local token, tail, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if bad_ttl(ttl) then return redis.error_reply('occupy: ttl must be positive ms') end
local held = redis.pcall('GET', lock)
-- Another type under the key (WRONGTYPE: an older layout, a shared prefix) is a value
-- occupy did not write, like a string it cannot parse: see FOREIGN below.
if type(held) == 'table' then held = '' end
local t = redis.call('TIME')
if not held then
  if redis.call('EXISTS', base .. 'queue') == 0 then
    local numbers = grant(token, '-', ttl, tail, t)
    @LEAVE@
    return numbers .. ' 1 ' .. token
  end
  -- Free, but others queued first (the holder expired, or a waiter gave up).
  @QUEUE@
  check_queue()
  if grant_next(t) == token then
    redis.call('DEL', wake .. token)
    return string.match(redis.call('GET', lock), '^%S+ %S+ (%d+ %d+ %d+)') .. ' 1 ' .. token
  end
  held = redis.call('GET', lock)
  if not held then  -- every waiter was dead
    return grant(token, '-', ttl, tail, t) .. ' 1 ' .. token
  end
end
local owner_token, flag, depth, fence, expires, rest =
  string.match(held, '^(%S+) (.)(%d+) (%d+) (%d+) (.*)$')
if not (owner_token and string.find(rest, '^%d+ .*%z')) then
  -- FOREIGN: held by an unknown holder, never free; refused with its PTTL.
  return {'', string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000)),
          redis.call('PTTL', lock)}
end
if owner_token == token then
  -- Handed over on a release; the wake-up it pushed is no longer needed.
  @QUEUE@
  leave_queue(token)
  redis.call('DEL', wake .. token)
  return fence .. ' ' .. expires .. ' ' .. string.match(rest, '^%d+') .. ' ' .. depth .. ' '
    .. token
end
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
@ENQUEUE@
return {string.sub(held, #owner_token + 2), string.format('%d', now_ms)}
"""

_ENQUEUE = """
@QUEUE@
check_queue()
redis.call('ZADD', queue, 'NX', string.format('%d', t[1] * 1000000 + t[2]), token)
redis.call('HSET', waiters, token, string.format('%d', now_ms + QUEUE_TTL) .. '|' ..
           string.format('%d', ttl) .. '|' .. tail)
redis.call('PEXPIRE', queue, QUEUE_TTL)
redis.call('PEXPIRE', waiters, QUEUE_TTL)
if flag ~= 'q' then redis.call('SETRANGE', lock, #owner_token + 1, 'q') end
"""


def _take(queueing: bool) -> str:
    """Return the take script: for ``try`` (no queue), or for ``enqueue`` / ``wait``."""
    text = _TAKE
    if queueing:
        text = text.replace("@LEAVE@", "@QUEUE@\nleave_queue(token)")
        text = text.replace("@ENQUEUE@", _ENQUEUE)
    else:
        text = text.replace("@LEAVE@", "").replace("@ENQUEUE@", "")
    # The queue's helpers are defined only on the branches that need them, so the
    # uncontended path does not pay for building them.
    return PRELUDE + text.replace("@QUEUE@", QUEUE_STEPS)


#: Take without queueing (``timeout=0``, and every first try).
ACQUIRE = _take(queueing=False)
#: Join the queue (``enqueue``) or keep one's place (``wait``); see :data:`ACQUIRE`.
QUEUE = _take(queueing=True)
