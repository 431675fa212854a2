"""The Lua scripts of occupy's Redis lock protocol, as named constants, and the layout
of Redis keys they share with the Python side (:func:`redis_keys`). They are the one
Redis protocol: :class:`~occupy.backends.redis.RedisBackend` and
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
:func:`scripts_for`, and the caller's owner and key travel as one argument, so each
call sends only what changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import NamedTuple

from occupy.backends.claims import digest

__all__ = [
    "ACQUIRE",
    "CANCEL",
    "EXTEND",
    "RELEASE",
    "RESUME",
    "TAKEOVER",
    "RedisKeys",
    "redis_keys",
    "scripts_for",
]


class RedisKeys(NamedTuple):
    """The Redis keys of one lock key; one hash tag, so one Redis Cluster slot."""

    lock: str
    fence: str
    queue: str
    waiters: str
    wake: str


@lru_cache(maxsize=4096)
def redis_keys(prefix: str, key: str, digest_chars: int = 32) -> RedisKeys:
    """Return the Redis keys of lock ``key``.

    The hash tag is the first ``digest_chars`` hex digits of the key's SHA-256 digest,
    so that a key holding ``{`` or ``}`` (or any other text) still puts all its Redis
    keys in one slot. The scripts find the other keys from ``lock``'s name, whatever
    the prefix and the tag's length.
    """
    base = f"{prefix}{{{digest(key)[:digest_chars]}}}:"
    return RedisKeys(
        f"{base}lock", f"{base}fence", f"{base}queue", f"{base}waiters", f"{base}wake:"
    )


#: Names and helpers every script starts with. ``grant`` writes a holder and returns
#: ``"<fence> <expires ms> <since ms>"``, the start of a grant's reply.
_PRELUDE = """
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
_QUEUE = """
local queue, waiters, wake = base .. 'queue', base .. 'waiters', base .. 'wake:'

local function leave_queue(token)
  redis.call('ZREM', queue, token)
  redis.call('HDEL', waiters, token)
  if redis.call('EXISTS', queue) == 0 then redis.call('DEL', waiters) end
end

-- The key is free: hand it to the oldest waiter whose deadline has not passed, and
-- push the grant to its wake-up list. Dead waiters met on the way are dropped.
local function grant_next(t)
  -- A counter that cannot give a fence: no hand-over (each waiter's own try reports it).
  if last_fence(base .. 'fence') == nil then return nil end
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
    return _PRELUDE + text.replace("@QUEUE@", _QUEUE)


#: Take without queueing (``timeout=0``, and every first try).
ACQUIRE = _take(queueing=False)
#: Join the queue (``enqueue``) or keep one's place (``wait``); see :data:`ACQUIRE`.
QUEUE = _take(queueing=True)

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
    _PRELUDE
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
    + _QUEUE
    + """
grant_next(redis.call('TIME'))
return 1
"""
)

#: Set a held lease to expire ttl ms after the server's now. ARGV: token, ttl ms.
#: Returns the new expiry in ms, or nil if the token does not hold the key.
EXTEND = (
    _PRELUDE
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
    _PRELUDE
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
#: ``q``); the old holder's pending wake-up, if a release had just handed the key to
#: it, is dropped, so that it queues again instead of taking a lease that is no longer
#: its own. Returns ``{"<fence> <expires ms> <since ms>", old value without its token
#: or false}`` (false too for a value occupy did not write, which is replaced). A
#: conditional takeover whose holder has another fence (a value occupy did not write
#: has fence 0, as ``holder()`` reports it) or that finds the key free changes nothing
#: and returns ``{false, old value without its token, or false if free, or "?" and
#: the value's PTTL for a value occupy did not write, the server's now in ms}``.
TAKEOVER = (
    _PRELUDE
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
local flag = '-'
if redis.call('EXISTS', base .. 'queue') == 1 then flag = 'q' end
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
    _PRELUDE
    + _QUEUE
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


@lru_cache(maxsize=16)
def scripts_for(fence_ttl_ms: int, queue_ttl_ms: int) -> Mapping[str, str]:
    """Return the scripts by name, with a protocol's TTLs written in."""

    def fill(text: str) -> str:
        return text.replace("@FENCE_TTL@", str(int(fence_ttl_ms))).replace(
            "@QUEUE_TTL@", str(int(queue_ttl_ms))
        )

    return {
        "acquire": fill(ACQUIRE),
        "queue": fill(QUEUE),
        "release": fill(RELEASE),
        "extend": fill(EXTEND),
        "resume": fill(RESUME),
        "takeover": fill(TAKEOVER),
        "cancel": fill(CANCEL),
    }
