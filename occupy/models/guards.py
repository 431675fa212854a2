"""The conditions of a guarded write: :class:`Check` (one condition on the stored row,
and the error when it fails) and :class:`Guard` (one way to write: the checks, the
columns it also sets, and the ones it reads back). :mod:`occupy.models.guarded` runs
them; :class:`~occupy.models.VersionedMixin` and :class:`~occupy.models.FencedMixin`
build them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import models
from django.db.models import Q

from occupy.exceptions import ConflictError

__all__ = ["Check", "Guard"]


@dataclass
class Check:
    """A condition of a guarded write: ``<field> <lookup> <value>`` on the stored row;
    when it fails, the write is refused with ``error``."""

    field: models.Field[Any, Any]
    lookup: str  # "exact" or "lte"
    value: Any
    error: type[ConflictError]

    def q(self) -> Q:
        """Return the condition as a ``Q`` on the field's own table."""
        name = self.field.attname
        if self.value is None:
            q = Q(**{f"{name}__isnull": True})
            if isinstance(self.field, models.JSONField):  # a JSON null is not SQL NULL
                q |= Q(**{f"{name}__exact": None})
            return q
        return Q(**{f"{name}__{self.lookup}": self.value})

    def holds_for(self, stored: Any) -> bool:
        """Return whether the condition holds for the ``stored`` value (for the error)."""
        if self.lookup == "lte":
            return stored is not None and stored <= self.value
        try:
            return bool(stored == self.value)
        except Exception:
            return False


@dataclass
class Guard:
    """One way to write: the ``checks`` the stored row must pass, the columns the write
    also ``sets`` (a version, a fence), and the ones to ``read_back`` after it because
    they were set by an expression."""

    checks: list[Check] = field(default_factory=list)
    sets: dict[models.Field[Any, Any], Any] = field(default_factory=dict)
    read_back: list[models.Field[Any, Any]] = field(default_factory=list)

    def extended(
        self,
        checks: Iterable[Check] = (),
        sets: dict[models.Field[Any, Any], Any] | None = None,
        read_back: Iterable[models.Field[Any, Any]] = (),
    ) -> Guard:
        """Return a copy of this guard with more checks, sets and read-backs."""
        return Guard(
            checks=[*self.checks, *checks],
            sets={**self.sets, **(sets or {})},
            read_back=[*self.read_back, *read_back],
        )
