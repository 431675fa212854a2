"""Remember what an instance was loaded with, to tell which fields changed since.

The loaded values are taken in ``from_db`` and ``refresh_from_db`` (the latter also
runs when a deferred field is first read), both public hooks of ``Model``; a save
remembers what it wrote.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import uuid
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models.options import Options

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["ChangeTrackingMixin", "concrete_field", "is_concrete_name", "is_expression"]

# Values that cannot change in place, so the loaded value is kept as is, not copied.
_IMMUTABLE = (
    str,
    int,
    float,
    bytes,
    decimal.Decimal,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    type(None),
)


def _frozen(value: Any) -> Any:
    """Return a copy of ``value`` that in-place changes to ``value`` do not reach."""
    if isinstance(value, _IMMUTABLE):
        return value
    if isinstance(value, memoryview):
        return bytes(value)
    try:
        return copy.deepcopy(value)
    except Exception:  # an uncopyable value: compared by identity then
        return value


def is_expression(value: Any) -> bool:
    """Return whether ``value`` is an expression (``F("stock") - 1``), not a value."""
    return hasattr(value, "resolve_expression")


class ChangeTrackingMixin(models.Model):
    """Tell which fields changed since the instance was loaded or last saved.

    Adds ``changed_fields()`` to a model.
    """

    class Meta:
        abstract = True

    @classmethod
    def from_db(
        cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any
    ) -> Self:
        """Build the instance as Django does (with whatever options it passes), and
        remember the loaded values."""
        instance = super().from_db(db, field_names, values, **kwargs)
        instance._remember()
        return instance

    def refresh_from_db(
        self,
        using: str | None = None,
        fields: Iterable[str] | None = None,
        from_queryset: models.QuerySet[Self] | None = None,
        **kwargs: Any,
    ) -> None:
        """Reload as Django does (also when a deferred field is first read), and
        remember the reloaded values as loaded."""
        # A list: Django reads the names, and so do we afterwards.
        names = None if fields is None else list(fields)
        super().refresh_from_db(using=using, fields=names, from_queryset=from_queryset, **kwargs)
        if names is None:
            self._remember()
        else:
            self._remember(
                {_attname(self._meta, name) for name in names if is_concrete_name(self._meta, name)}
            )

    def _remember(self, attnames: Iterable[str] | None = None) -> None:
        loaded: dict[str, Any] = self.__dict__.setdefault("_occupy_loaded", {})
        if attnames is None:
            loaded.clear()
            attnames = [f.attname for f in self._meta.concrete_fields]
        for attname in attnames:
            value = self.__dict__.get(attname, _MISSING)
            if value is _MISSING or is_expression(value):
                loaded.pop(attname, None)  # deferred, or set by an expression: unknown
            else:
                loaded[attname] = _frozen(value)

    def changed_fields(self) -> list[str]:
        """Return the names of the fields assigned a different value since the instance
        was loaded or last saved (all assigned fields for an instance never loaded)."""
        return [f.name for f in self._changed()]

    def _changed(self) -> list[models.Field[Any, Any]]:
        loaded = self.__dict__.get("_occupy_loaded", {})
        managed = self.managed_field_names()
        changed = []
        for f in self._meta.concrete_fields:
            if f.primary_key or getattr(f, "generated", False) or f.name in managed:
                continue
            value = self.__dict__.get(f.attname, _MISSING)
            if value is _MISSING:  # deferred and never assigned
                continue
            if (
                f.attname not in loaded
                or is_expression(value)
                or _differs(value, loaded[f.attname])
            ):
                changed.append(f)
        return changed

    def managed_field_names(self) -> set[str]:
        """Return the fields the model writes itself (a version, a fence): never counted
        as changed."""
        return set()


_MISSING = object()


def _differs(value: Any, loaded: Any) -> bool:
    try:
        return bool(value != loaded)
    except Exception:  # values that cannot be compared count as changed
        return True


def is_concrete_name(meta: Options[Any], name: str) -> bool:
    """Return whether ``name`` (a name or attname) is a concrete, non-m2m field."""
    try:
        f = meta.get_field(name)
    except Exception:
        return False
    return bool(getattr(f, "concrete", False)) and not f.many_to_many


def concrete_field(meta: Options[Any], name: str) -> models.Field[Any, Any]:
    """Return the field ``name`` (a name or attname) of ``meta``; ``ValueError`` for a
    relation's reverse side, which has no column."""
    f = meta.get_field(name)
    if not isinstance(f, models.Field):
        raise ValueError(f"{meta.object_name}.{name} is a reverse relation, not a field.")
    return f


def _attname(meta: Options[Any], name: str) -> str:
    return concrete_field(meta, name).attname
