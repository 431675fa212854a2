"""The attributes occupy records: the backend alias and the key's family, plus one value
from a fixed set (an outcome, a reason), never a full key, an owner or a token; spans and
events also carry the store kind. Each set is made once per (backend, family, outcome)
and shared.

Invariants:

- A metric record carries as few attributes as tell its series apart: the SDK copies and
  hashes every attribute of every synchronous record (about a tenth of a record's cost
  each), so the store kind, which the backend alias already fixes, is left to spans
  (:attr:`AttributeSet.span_attributes`).

- The key-family function (``OCCUPY["TELEMETRY"]["KEY_FAMILY"]``) is called once per key
  (a bounded cache: :data:`FAMILY_CACHE_SIZE` keys). If it raises, returns something
  other than a non-empty ``str``, or cannot be loaded, that is logged once and the
  default family is used: telemetry never fails a lock.
- An :class:`AttributeSet`'s mapping is handed to the SDK as is and never changed in
  place; its :attr:`~AttributeSet.ident` is its content, so that sets rebuilt after a
  settings reload count in the same in-process tallies as the old ones.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol

from django.utils.module_loading import import_string

from occupy.conf import occupy_settings

__all__ = [
    "FAMILY_CACHE_SIZE",
    "OTHER",
    "AttributeSet",
    "Backend",
    "attribute_set",
    "family",
    "key_attributes",
    "key_sets",
    "store_kind",
]

logger = logging.getLogger("occupy.telemetry")

#: The family of a key without a ``:`` (it has no family part; the key itself may be
#: anything, so it never becomes an attribute).
OTHER = "other"
#: How many keys' families the cache keeps (least recently used go first).
FAMILY_CACHE_SIZE = 4096

Value = str | int


class Backend(Protocol):
    """What telemetry reads of a backend (a :class:`~occupy.backends.base.BaseBackend`,
    which telemetry does not import: the backends report to it): its alias, and for
    :func:`store_kind`, its class and ``store_kind`` if it has one."""

    @property
    def alias(self) -> str:
        """The backend's alias in ``OCCUPY["BACKENDS"]``."""


class AttributeSet:
    """One set of attributes, made once and shared: :attr:`attributes` is what the SDK's
    metric instruments are given, :attr:`span_attributes` what spans and events are
    given (the same plus ``spans_only``), :attr:`ident` the metric content (the key of
    the in-process tallies), :attr:`cells` its tally of each counter once found (so that
    a count does not hash :attr:`ident`)."""

    __slots__ = ("_more", "_spans_only", "attributes", "cells", "ident", "span_attributes")

    def __init__(
        self, attributes: dict[str, Value], spans_only: dict[str, Value] | None = None
    ) -> None:
        self.attributes = attributes
        self._spans_only = spans_only
        self.span_attributes = attributes if spans_only is None else {**attributes, **spans_only}
        self.ident: tuple[tuple[str, Value], ...] = tuple(attributes.items())
        self._more: dict[tuple[str, Value], AttributeSet] = {}
        #: Counter name -> its tally under this set (written by ``instruments.count``).
        self.cells: dict[str, list[Any]] = {}

    def plus(self, name: str, value: Value) -> AttributeSet:
        """Return this set with ``name`` = ``value`` added, made once."""
        found = self._more.get((name, value))
        if found is None:
            found = self._more.setdefault(
                (name, value),
                AttributeSet({**self.attributes, name: value}, self._spans_only),
            )
        return found


# --- the key's family -------------------------------------------------------------------


def _default_family(key: str) -> str:
    family, colon, _rest = key.partition(":")
    return family if colon else OTHER


_family: Callable[[str], str] | None = None


def family(key: str) -> str:
    """Return the key's family, the only part of a key that reaches an attribute."""
    found = _family
    if found is None:
        found = _load_family()
    return found(key)


def _load_family() -> Callable[[str], str]:
    global _family
    hook: Any = None
    try:
        path = occupy_settings.TELEMETRY["KEY_FAMILY"]
        if path is not None:
            hook = import_string(path)
            if not callable(hook):
                raise TypeError(f"{path!r} is a {type(hook).__name__}, not a function")
    except Exception:  # check reports it (occupy.E007); a lock must not fail on it
        logger.exception(
            "OCCUPY['TELEMETRY']['KEY_FAMILY'] cannot be used; keys get their default family "
            "(the part before the first ':')"
        )
        hook = None
        path = None
    _family = _default_family if hook is None else _guarded(hook, path)
    return _family


def _guarded(hook: Callable[[str], Any], path: str) -> Callable[[str], str]:
    """Return ``hook`` called once per key (cached), its failures logged once and
    answered with the default family."""
    warned = False

    @functools.lru_cache(maxsize=FAMILY_CACHE_SIZE)
    def call(key: str) -> str:
        nonlocal warned
        try:
            name = hook(key)
            if not isinstance(name, str) or not name:
                raise TypeError(f"it returned {type(name).__name__}, not a non-empty str")
        except Exception:
            if not warned:
                warned = True
                logger.exception(
                    "OCCUPY['TELEMETRY']['KEY_FAMILY'] (%s) failed; keys it fails on get their "
                    "default family (logged once)",
                    path,
                )
            return _default_family(key)
        return name

    return call


def _forget_family() -> None:
    global _family
    _family = None
    _by_key.clear()  # the family function, and a backend's class, may have changed


occupy_settings.on_reload(_forget_family)


# --- the sets ---------------------------------------------------------------------------

_kinds: dict[type, str] = {}


def store_kind(backend: Backend) -> str:
    """Return the kind of store ``backend`` keeps its locks in (``database``, ``redis``…)."""
    kind = _kinds.get(type(backend))
    if kind is None:
        declared = getattr(type(backend), "store_kind", None)
        if isinstance(declared, str):
            kind = declared
        else:
            name = type(backend).__name__
            kind = (name[: -len("Backend")] if name.endswith("Backend") else name).lower()
        _kinds[type(backend)] = kind
    return kind


#: The common attributes by (alias, store kind, family). Never cleared: a set's content
#: does not depend on the settings, and families are few by design.
_key_sets: dict[tuple[str, str, str], AttributeSet] = {}
_other_sets: dict[tuple[tuple[str, Value], ...], AttributeSet] = {}


#: The common attributes by (backend class, alias, key): a bounded cache in front of
#: :func:`family` and :func:`store_kind`, emptied when full (keys may be many, sets are
#: few) and on a settings reload.
_by_key: dict[tuple[type, str, str], AttributeSet] = {}


def key_attributes(backend: Backend, key: str) -> AttributeSet:
    """Return the common attributes of ``key`` on ``backend``."""
    found = _by_key.get((type(backend), backend.alias, key))
    if found is None:
        found = _key_set(backend, key)
        if len(_by_key) >= FAMILY_CACHE_SIZE:
            _by_key.clear()
        _by_key[(type(backend), backend.alias, key)] = found
    return found


def _key_set(backend: Backend, key: str) -> AttributeSet:
    name = family(key)
    kind = store_kind(backend)
    found = _key_sets.get((backend.alias, kind, name))
    if found is None:
        found = _key_sets.setdefault(
            (backend.alias, kind, name),
            AttributeSet(
                {"occupy.backend": backend.alias, "occupy.key.family": name},
                {"occupy.store": kind},
            ),
        )
    return found


def key_sets() -> list[AttributeSet]:
    """Return every set of common attributes made so far."""
    return list(_key_sets.values())


def attribute_set(*pairs: tuple[str, Value]) -> AttributeSet:
    """Return the set of ``pairs`` (attributes not about a key: a model, a status)."""
    found = _other_sets.get(pairs)
    if found is None:
        found = _other_sets.setdefault(pairs, AttributeSet(dict(pairs)))
    return found
