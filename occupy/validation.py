"""Argument checks shared by every entry point, run before anything is written.

Each raises ``TypeError`` for a wrong type and ``ValueError`` for a wrong value, with a
message that names the argument and the value.

Keys, owners and client labels carry no **control characters** (one rule,
:data:`CONTROL_CHARACTERS`): what an operator's terminal or a log would act on instead
of showing (ESC, BEL, a newline that forges a row, U+202E that reverses what follows).
Everything occupy prints for an operator passes through :func:`printable`, which
escapes them as ``repr`` would, for values written before the rule or by another
program.

Durations follow one rule, whatever they time (a ``ttl``, ``extend``'s ttl, a
``timeout``, a backend's ``POLL_INTERVAL``, the ``OCCUPY`` settings):

- seconds, as an ``int`` or a ``float`` (never a ``bool``, a string or NaN);
- a lifetime or an interval lies between :data:`MIN_TTL` (a millisecond: the finest
  time every store keeps; a store rounds it up to its own resolution, never down to
  nothing) and :data:`MAX_TTL` (ten years), both included; anything else is refused;
- a wait (``timeout``) is 0 or more; ``None``, infinity and anything longer than
  :data:`MAX_TTL` mean *wait forever*. So no finite number reaches a socket, a thread
  or a statement timeout that could overflow: a wait of ten years and more is
  forever, and is bounded by nothing, as ``None`` is;
- a request's wait for another write in flight (``WRITE_WAIT``, a view's
  ``write_wait``) is a wait of at most :data:`MAX_WRITE_WAIT`: a request hangs that
  long at most.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = [
    "CONTROL_CHARACTERS",
    "MAX_FENCE",
    "MAX_KEY_LENGTH",
    "MAX_TTL",
    "MAX_WRITE_WAIT",
    "MIN_TTL",
    "check_client",
    "check_fence",
    "check_key",
    "check_owner",
    "check_timeout",
    "check_token",
    "check_ttl",
    "check_write_wait",
    "duration_problem",
    "printable",
]

#: Longest key, in characters; every backend stores keys of this length.
MAX_KEY_LENGTH = 255
#: Longest lease, in seconds (ten years): a longer one is a unit mistake.
MAX_TTL = 10 * 365 * 24 * 3600
#: Shortest lease or interval, in seconds: one millisecond, the coarsest resolution of
#: any store (Redis keeps expiries in whole milliseconds).
MIN_TTL = 0.001

#: Longest a request waits for another write in flight, in seconds.
MAX_WRITE_WAIT = 60

#: Largest fence a store keeps (a signed 64-bit column).
MAX_FENCE = 2**63 - 1


_REALS = (int, float)

#: The control characters, refused in keys, owners and client labels and escaped in
#: whatever occupy prints: the C0 and C1 controls and DEL (Unicode category Cc: NUL,
#: BEL, ESC, newline, tab…), the line and paragraph separators U+2028 and U+2029, and
#: the bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A to U+202E,
#: U+2066 to U+2069), which reorder the text shown after them. A fixed set, so the rule
#: does not change with the Unicode version of the Python that runs it.
CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """Return ``text`` with its control characters (:data:`CONTROL_CHARACTERS`) escaped
    as ``repr`` escapes them (``\\n``, ``\\x1b``, ``\\u202e``), for a terminal or a log."""
    if text.isascii() and text.isprintable():
        return text
    return CONTROL_CHARACTERS.sub(lambda m: repr(m.group())[1:-1], text)


def _controls(name: str, value: str) -> ValueError:
    """Return the error for ``value``, which holds control characters."""
    found = sorted(set(CONTROL_CHARACTERS.findall(value)))
    shown = ", ".join(repr(c)[1:-1] for c in found[:5])
    cut = f"{value!r}" if len(value) <= 80 else f"{value[:80]!r}…"
    return ValueError(f"{name} must not contain control characters ({shown}): {cut}.")


def check_key(key: Any, *, name: str = "key") -> str:
    """Return ``key`` if it is a usable lock key, else raise naming the problem."""
    # The usual key first, in one test: printable ASCII holds no control character and
    # no lone surrogate.
    if type(key) is str and 0 < len(key) <= MAX_KEY_LENGTH and key.isascii() and key.isprintable():
        return key
    if not isinstance(key, str):
        raise TypeError(f"{name} must be a str, not {type(key).__name__} ({key!r}).")
    if not key:
        raise ValueError(f"{name} must not be empty.")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(
            f"{name} is {len(key)} characters long; at most {MAX_KEY_LENGTH} are allowed "
            f"({key[:40]!r}…)."
        )
    if "\x00" in key:
        raise ValueError(f"{name} must not contain NUL characters ({key!r}).")
    if CONTROL_CHARACTERS.search(key):
        raise _controls(name, key)
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name} is not valid Unicode text ({key!r}): {e.reason}.") from e
    return key


def check_owner(owner: Any) -> str:
    """Return ``owner`` if it is a usable owner name, else raise naming the problem."""
    return check_key(owner, name="owner")


def check_client(client: str, *, name: str = "client") -> str:
    """Return ``client`` (a client's label, as the ``Occupy-Client`` header gives it) if
    it holds no control characters, else raise ``ValueError`` naming ``name``."""
    if CONTROL_CHARACTERS.search(client):
        raise _controls(name, client)
    return client


#: What a lease token may look like: occupy's are 32 hex digits (``new_token()``).
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")


def check_token(token: Any) -> str:
    """Return ``token`` if it has the form of a lease token, else raise naming the
    problem (a token of that form that holds nothing is the store's to refuse)."""
    if type(token) is str and _TOKEN.fullmatch(token):
        return token
    if not isinstance(token, str):
        raise TypeError(f"token must be a str, not {type(token).__name__}.")
    raise ValueError(
        "token must be 16 to 64 letters, digits, '-' or '_' (a lease's token); "
        f"got {len(token)} characters."
    )


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{name} must be a number of seconds, not {type(value).__name__} ({value!r})."
        )
    if isinstance(value, int):
        # An int too large for a float is far past any bound: infinity keeps its sign.
        return float(value) if abs(value) < 2**1000 else (math.inf if value > 0 else -math.inf)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number of seconds, not NaN.")
    return float(value)


def check_ttl(ttl: Any, *, name: str = "ttl") -> float:
    """Return ``ttl`` as seconds if it lies between :data:`MIN_TTL` and :data:`MAX_TTL`,
    else raise naming ``name``."""
    if type(ttl) in _REALS and MIN_TTL <= ttl <= MAX_TTL:  # NaN and infinity fail this
        return float(ttl)
    seconds = _number(name, ttl)
    if isinstance(ttl, float) and math.isinf(ttl):
        raise ValueError(f"{name} must be finite, not {ttl!r}; use renew=True for long work.")
    if seconds <= 0:
        raise ValueError(f"{name} must be positive, not {ttl!r}.")
    if seconds < MIN_TTL:
        raise ValueError(
            f"{name} must be at least {MIN_TTL:g} seconds (a millisecond, the "
            f"finest time a store keeps), not {ttl!r}."
        )
    if seconds > MAX_TTL:
        raise ValueError(f"{name} must be at most {MAX_TTL} seconds (ten years), not {ttl!r}.")
    return seconds


def check_timeout(timeout: Any, *, name: str = "timeout") -> float | None:
    """Return ``timeout`` as seconds, or ``None`` to wait forever (for ``None``,
    infinity, and anything above :data:`MAX_TTL`), else raise naming ``name``."""
    if timeout is None:
        return None
    if type(timeout) in _REALS and 0 <= timeout <= MAX_TTL:
        return float(timeout)
    seconds = _number(name, timeout)
    if seconds < 0:
        raise ValueError(f"{name} must be 0 or more (or None to wait forever), not {timeout!r}.")
    return None  # longer than ten years: forever, as the module docstring says


def check_write_wait(wait: Any, *, name: str = "write_wait") -> float:
    """Return ``wait`` as seconds if it is a wait of 0 to :data:`MAX_WRITE_WAIT`
    seconds, else raise naming ``name``."""
    seconds = None if wait is None else check_timeout(wait, name=name)
    if seconds is None or seconds > MAX_WRITE_WAIT:
        raise ValueError(
            f"{name} is how long a write waits for another write in flight: a few "
            f"seconds at most, not {wait!r} (a request would hang for that long)."
        )
    return seconds


def duration_problem(value: Any) -> str | None:
    """Return what keeps ``value`` from being a lifetime or an interval by the rule of
    :func:`check_ttl` (``"must be …"``, for a setting's message), or ``None``."""
    try:
        check_ttl(value, name="it")
    except (TypeError, ValueError) as e:
        return str(e).removeprefix("it ").rstrip(".")
    return None


def check_fence(fence: Any, *, name: str = "if_fence") -> int | None:
    """Return ``fence`` if it is ``None`` or a fence a store can hold (an ``int`` from
    0 to :data:`MAX_FENCE`), else raise naming the problem."""
    if fence is None or (type(fence) is int and 0 <= fence <= MAX_FENCE):
        return fence
    if isinstance(fence, bool) or not isinstance(fence, int):
        raise TypeError(
            f"{name} must be an int (a Holder's fence) or None, not "
            f"{type(fence).__name__} ({fence!r})."
        )
    if fence < 0 or fence > MAX_FENCE:
        raise ValueError(f"{name} must be a fence from 0 to {MAX_FENCE}, not {fence!r}.")
    return int(fence)
