"""A backend's configuration: :class:`ConfiguredBackend`, the part of
:class:`~occupy.backends.base.BaseBackend` that reads ``OCCUPY["BACKENDS"][alias]``
(``LOCATION`` and the ``OPTIONS`` its :attr:`~ConfiguredBackend.options_schema`
declares) and reports what is wrong with it, when it is built and in ``manage.py
check`` alike; and the messages of ``check --database`` about its store."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from django.core.checks import CheckMessage, Error, Warning

from occupy.backends.options import Option, raise_problems, read_options, where
from occupy.docs import docs_url

__all__ = ["ConfiguredBackend", "store_reason", "unknown_claims", "unreachable_store"]


class ConfiguredBackend:
    """A backend built from its configuration, ``params`` (``OCCUPY["BACKENDS"][alias]``):
    refused, naming the alias and the key, when that configuration is wrong."""

    #: The ``OPTIONS`` keys this backend takes; any other key is refused (a typo).
    options_schema: ClassVar[Mapping[str, Option]] = {}
    #: Whether the configuration must give a ``LOCATION`` (a directory, a URL).
    requires_location: ClassVar[bool] = False

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        options, problems = read_options(alias, params, self.options_schema)
        raise_problems(problems + self.config_problems(alias, params, options))
        self.alias = alias
        self.params = params
        self.options: dict[str, Any] = options
        self.location = params.get("LOCATION")

    @classmethod
    def config_problems(
        cls, alias: str, params: Mapping[str, Any], options: Mapping[str, Any]
    ) -> list[str]:
        """Return what is wrong with the configuration beyond each option's own type and
        range: ``LOCATION``, options that must agree with each other. ``options`` holds
        every option, defaults filled in. The default checks only that a backend which
        :attr:`requires_location` has one."""
        if cls.requires_location and not params.get("LOCATION"):
            return [f"{where(alias)} ({cls.__name__}) has no LOCATION."]
        return []

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Return the system check messages for this backend's configuration.

        ``manage.py check`` calls it for every alias. The default reports what building
        the backend would refuse (``occupy.E006``); a backend adds what it can only
        check against the rest of the settings (a database or cache that is not
        configured, a cache that cannot lock) with ``super().check(...) + [...]``.
        """
        options, problems = read_options(alias, params, cls.options_schema)
        problems += cls.config_problems(alias, params, options)
        return [
            Error(
                problem,
                obj=where(alias),
                id="occupy.E006",
                hint=f"{cls.__name__}'s options are listed in its options_schema "
                f"and, for occupy's backends, at {docs_url('backends/')}.",
            )
            for problem in problems
        ]


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
