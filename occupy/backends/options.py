"""The keys a backend accepts in its configuration, declared once and checked once.

Each backend class lists its ``OPTIONS`` keys as :class:`Option` values in
``BaseBackend.options_schema``. :func:`read_options` checks a configuration against
it (unknown keys, wrong types, non-positive numbers) and returns every option with its
default filled in; ``manage.py check`` reports the same problems (``occupy.E006``) that
building the backend raises, word for word.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.checks import CheckMessage, Error

from occupy.exceptions import InvalidBackendError
from occupy.validation import duration_problem

__all__ = [
    "CONFIG_KEYS",
    "Option",
    "cache_store",
    "missing_cache",
    "raise_problems",
    "read_options",
    "where",
]

#: The keys of ``OCCUPY["BACKENDS"][alias]`` itself (``OPTIONS`` holds the rest).
CONFIG_KEYS = frozenset({"BACKEND", "LOCATION", "OPTIONS"})


def where(alias: str, name: str | None = None) -> str:
    """Return how a setting is written in ``settings.py``, for messages."""
    path = f"OCCUPY['BACKENDS'][{alias!r}]"
    return path if name is None else f"{path}['OPTIONS'][{name!r}]"


@dataclass(frozen=True)
class Option:
    """One ``OPTIONS`` key: its type, its default, and what a value must satisfy.

    ``kind`` is a type or a tuple of types (``float`` also takes an ``int``; ``bool``
    is never taken for a number). ``positive`` marks a duration in seconds, which must
    follow the rule of :mod:`occupy.validation` (a millisecond to ten years).
    ``check``, if given, returns a complaint about a value (``"must be …"``) or ``None``.
    """

    kind: type | tuple[type, ...]
    default: Any
    help: str = ""
    positive: bool = False
    check: Callable[[Any], str | None] | None = None

    def problem(self, value: Any) -> str | None:
        """Return what is wrong with ``value`` (``"must be …"``), or ``None``."""
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        if float in kinds and int not in kinds:
            kinds = (*kinds, int)
        if isinstance(value, bool) and bool not in kinds:
            return f"must be {_names(kinds)}, not {value!r}"
        if not isinstance(value, kinds):
            return f"must be {_names(kinds)}, not {type(value).__name__} {value!r}"
        if self.positive and (problem := duration_problem(value)) is not None:
            return problem
        return self.check(value) if self.check else None


def _names(kinds: tuple[type, ...]) -> str:
    words = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
    return " or ".join(dict.fromkeys(words.get(kind, kind.__name__) for kind in kinds))


def read_options(
    alias: str, config: Mapping[str, Any], schema: Mapping[str, Option]
) -> tuple[dict[str, Any], list[str]]:
    """Return ``config["OPTIONS"]`` over the schema's defaults, and the problems found.

    Each problem is a whole sentence naming the alias and the key: an unknown key of
    the configuration or of its ``OPTIONS`` (a typo such as ``"POLL_INTERVALL"``), or a
    value of the wrong type or range. The caller raises or reports them.
    """
    problems = []
    unknown = sorted(set(config) - CONFIG_KEYS)
    if unknown:
        problems.append(
            f"{where(alias)} has unknown keys {unknown}; known keys are {sorted(CONFIG_KEYS)}."
        )
    given = config.get("OPTIONS") or {}
    if not isinstance(given, Mapping):
        problems.append(f"{where(alias)}['OPTIONS'] must be a dict, not {type(given).__name__}.")
        given = {}
    unknown = sorted(set(given) - set(schema))
    if unknown:
        known = sorted(schema) or "none"
        problems.append(
            f"{where(alias)}['OPTIONS'] has unknown keys {unknown}; "
            f"{type_name(config)} accepts {known}."
        )
    options = {}
    for name, option in schema.items():
        value = given.get(name, option.default)
        if name in given and (problem := option.problem(value)) is not None:
            problems.append(f"{where(alias, name)} {problem}.")
            value = option.default
        options[name] = value
    return options, problems


def type_name(config: Mapping[str, Any]) -> str:
    """Return the short name of the configured backend class, for messages."""
    path = config.get("BACKEND")
    return path.rpartition(".")[2] if isinstance(path, str) and path else "this backend"


def raise_problems(problems: list[str]) -> None:
    """Raise ``InvalidBackendError`` listing ``problems`` (if there are any)."""
    if problems:
        raise InvalidBackendError(" ".join(problems))


def missing_cache(alias: str, cache: Any) -> list[CheckMessage]:
    """Return ``occupy.E004`` if the cache alias ``cache`` is not in ``settings.CACHES``."""
    from django.core.cache import caches

    if not isinstance(cache, str) or cache in caches.settings:
        return []
    return [
        Error(
            f"occupy backend {alias!r} uses cache {cache!r}, which is not in settings.CACHES.",
            hint=f"Set OPTIONS['CACHE'] to one of {sorted(caches.settings)}.",
            obj=where(alias),
            id="occupy.E004",
        )
    ]


def cache_store(cache: str) -> str:
    """Return the cache ``cache`` and where its server is, for error messages."""
    from django.core.cache import caches

    location = caches.settings.get(cache, {}).get("LOCATION")
    if isinstance(location, list | tuple):
        location = ", ".join(map(str, location))
    if isinstance(location, str):  # never a password ("redis://:secret@host")
        location = re.sub(r"//[^/@]*@", "//", location)
    return f"cache {cache!r}" + (f" ({location})" if location else "")
