"""What a backend says about its store to an operator: the driver's reason in one
sentence (:func:`store_reason`), and the messages of ``check --database``
(:func:`unknown_claims`, :func:`unreachable_store`). The configuration itself is read
and checked by :class:`~occupy.backends.base.BaseBackend`."""

from __future__ import annotations

import re

from django.core.checks import CheckMessage, Warning

from occupy.backends.options import where

__all__ = ["store_reason", "unknown_claims", "unreachable_store"]


#: The longest reason :func:`store_reason` gives, in characters.
REASON_MAX = 300
_ADDRESS = re.compile(r"\bhost=([^,()<>\s]+),.*?\bport=(\d+)")


def store_reason(error: BaseException) -> str:
    """Return the first line of what the store's driver said (the cause of an occupy
    error, else the error itself), without its final full stop, in a sentence an
    operator reads: the ``<…>`` object representations a driver embeds (redis-py's
    Sentinel errors carry one per sentinel, about a thousand characters each) are
    cut to the address they name, and the whole to :data:`REASON_MAX` characters."""
    cause = error.__cause__ if error.__cause__ is not None else error
    lines = str(cause).strip().splitlines()
    reason = _without_reprs(lines[0] if lines else type(cause).__name__).rstrip(".")
    return reason if len(reason) <= REASON_MAX else f"{reason[: REASON_MAX - 1]}…"


def _without_reprs(text: str) -> str:
    """Return ``text`` with each outermost ``<…>`` replaced by the ``host:port`` it
    names, or by ``…``."""
    out: list[str] = []
    depth = start = 0
    for i, char in enumerate(text):
        if char == "<":
            if depth == 0:
                start = i
            depth += 1
        elif char == ">" and depth:
            depth -= 1
            if depth == 0:
                found = _ADDRESS.search(text, start, i)
                out.append(f"{found[1]}:{found[2]}" if found else "…")
        elif depth == 0:
            out.append(char)
    if depth:  # an unbalanced "<": keep the text as it came
        out.append(text[start:])
    return "".join(out)


def unknown_claims(alias: str, found: list[str]) -> CheckMessage:
    """Return ``occupy.W004``: backend ``alias``'s store holds claims occupy did not
    write, under the keys ``found``."""
    shown = ", ".join(repr(name) for name in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return Warning(
        f"occupy backend {alias!r} has {len(found)} claim(s) occupy did not write: "
        f"{shown}{more}. Each is held by an unknown holder until it expires.",
        hint="Give occupy a store of its own (a Redis PREFIX, a LOCATION); "
        "sweep_locks removes expired claim files, and Redis drops values when they "
        "expire (delete those without an expiry by hand).",
        obj=where(alias),
        id="occupy.W004",
    )


def unreachable_store(alias: str, store: str, fix: str, error: BaseException) -> CheckMessage:
    """Return ``occupy.W007``: backend ``alias`` could not read ``store`` (its
    ``describe_store()``; ``fix`` is its ``store_fix()``)."""
    return Warning(
        f"occupy backend {alias!r} could not read {store}: {store_reason(error)}.",
        hint=f"{fix[0].upper()}{fix[1:]}.",
        obj=where(alias),
        id="occupy.W007",
    )
