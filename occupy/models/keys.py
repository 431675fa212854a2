"""The lock key of a model instance: ``"<app_label>.<model_name>:<pk>"``, shortened
with a digest when it would be too long (the format is :mod:`occupy.keys`'s).

The database backend links a claim on such a key to the instance (the ``Occupation``
row's content type and object id), which is what ``occupied()``, ``free()`` and
``claim()`` query.

The ``<pk>`` part is the primary key as text (:func:`pk_text`): ``str(pk)`` for a
primary key of one field; for a composite primary key (``CompositePrimaryKey``), its
values in the key's order, joined by ``,``, each written as for one field but with
``%`` and ``,`` escaped as ``%25`` and ``%2C``, and a UUID as its 32 hex digits:
``Seat(show="Hamlet, Act 1", number=7)`` is ``"app.seat:Hamlet%2C Act 1,7"``.
:func:`parse_pk_text` reads it back, and :func:`pk_text_expression` writes the same
text in SQL, from a row's columns.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import F, OuterRef, TextField, Value
from django.db.models.expressions import Combinable
from django.db.models.functions import Cast, Concat, Replace

from occupy import keys

__all__ = [
    "concrete_model",
    "is_composite",
    "lock_model",
    "object_key",
    "parse_pk_text",
    "pk_fields",
    "pk_text",
    "pk_text_expression",
    "value_field",
]

#: Separates the values of a composite primary key in its text form.
PK_SEPARATOR = ","
#: How a value of a composite primary key escapes the separator (and the escape itself).
_ESCAPES = (("%", "%25"), (PK_SEPARATOR, "%2C"))


def concrete_model(model: type[models.Model]) -> type[models.Model]:
    """Return the model whose table holds ``model``'s own fields (itself, or the model
    a proxy stands for); ``TypeError`` for an abstract model, which has no rows."""
    concrete = model._meta.concrete_model
    if concrete is None:
        raise TypeError(f"{model.__name__} is abstract: it has no rows.")
    return concrete


def lock_model(model: type[models.Model]) -> type[models.Model]:
    """Return the model whose name the lock keys of ``model``'s rows carry.

    A proxy and the children of multi-table inheritance share their rows' primary
    key with the concrete root model, so they lock on the root's key: locking an
    ``EBook`` excludes whoever locks the same row as a ``Book``.
    """
    concrete = concrete_model(model)
    parents = concrete._meta.get_parent_list()
    return parents[-1] if parents else concrete


def object_key(model: type[models.Model], pk: Any) -> str:
    """Return the lock key of the row of ``model`` with primary key ``pk``.

    Raise ``ValueError`` when ``pk`` is ``None`` (an unsaved instance has no row to
    lock). A key that would be longer than a key may be keeps its readable start and
    ends with a digest of the primary key's text (see :mod:`occupy.keys`).
    """
    if pk is None:
        raise ValueError(
            f"This {model._meta.object_name} has no primary key yet: save it before locking it."
        )
    return keys.object_key(lock_model(model)._meta.label_lower, pk_text(model, pk))


def is_composite(model: type[models.Model]) -> bool:
    """Return whether ``model``'s primary key is a ``CompositePrimaryKey``."""
    return bool(model._meta.is_composite_pk)


def pk_fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    """Return the fields of ``model``'s primary key: one, or those of a composite key."""
    pk = model._meta.pk
    return list(pk.fields) if is_composite(model) else [pk]  # type: ignore[attr-defined]


def value_field(field: models.Field[Any, Any]) -> models.Field[Any, Any]:
    """Return the field whose values ``field`` holds (through relations and parent links)."""
    while isinstance(field, models.ForeignKey):
        field = field.target_field
    return field


def _component_text(field: models.Field[Any, Any], value: Any) -> str:
    value = value_field(field).to_python(value)
    text = value.hex if isinstance(value, uuid.UUID) else str(value)
    for char, escape in _ESCAPES:
        text = text.replace(char, escape)
    return text


def pk_text(model: type[models.Model], pk: Any) -> str:
    """Return the text form of ``model``'s primary key ``pk``, the part of its lock key
    after the ``:`` (see the module's docstring); ``ValueError`` for a composite key
    given the wrong number of values."""
    if not is_composite(model):
        return str(pk)
    fields = pk_fields(model)
    if not isinstance(pk, (tuple, list)) or len(pk) != len(fields):
        raise ValueError(
            f"{model._meta.object_name}'s primary key has {len(fields)} values "
            f"({', '.join(f.name for f in fields)}), not {pk!r}."
        )
    if any(value is None for value in pk):
        raise ValueError(
            f"This {model._meta.object_name} has no primary key yet ({pk!r}): save it "
            "before locking it."
        )
    return PK_SEPARATOR.join(_component_text(f, v) for f, v in zip(fields, pk, strict=True))


def parse_pk_text(model: type[models.Model], text: str) -> Any:
    """Return the primary key of ``model`` that :func:`pk_text` wrote as ``text`` (a
    tuple for a composite key); ``ValueError`` for text that names no valid key."""
    fields = pk_fields(model)
    parts = text.split(PK_SEPARATOR) if is_composite(model) else [text]
    if len(parts) != len(fields):
        raise ValueError(f"{text!r} is not a primary key of {model._meta.object_name}.")
    values = []
    for field, part in zip(fields, parts, strict=True):
        if len(fields) > 1:
            for char, escape in reversed(_ESCAPES):
                part = part.replace(escape, char)
        try:
            values.append(value_field(field).to_python(part))
        except ValidationError as e:
            raise ValueError(
                f"{text!r} is not a primary key of {model._meta.object_name}: {e}"
            ) from e
    return tuple(values) if is_composite(model) else values[0]


def pk_text_expression(model: type[models.Model], *, outer: bool = False) -> Combinable:
    """Return an SQL expression of a row's primary key in its text form: what
    ``Cast(pk, TextField())`` is for one field, and :func:`pk_text` for a composite key.
    ``outer=True`` reads the row of the outer query (``OuterRef``), for a subquery.

    A composite key's values are compared as text: integers, strings and UUIDs (and
    relations to them) have the same text in SQL as in Python.
    """
    ref = OuterRef if outer else F
    if not is_composite(model):
        return Cast(ref("pk"), TextField())
    parts: list[Any] = []
    for field in pk_fields(model):
        if parts:
            parts.append(Value(PK_SEPARATOR))
        text: Any = Cast(ref(field.attname), TextField())
        target = value_field(field)
        if isinstance(target, models.UUIDField):
            # 32 hex digits whether the database stores a uuid (dashed text) or not.
            text = Replace(text, Value("-"), Value(""), output_field=TextField())
        elif not isinstance(target, models.IntegerField):
            for char, escape in _ESCAPES:
                text = Replace(text, Value(char), Value(escape), output_field=TextField())
        parts.append(text)
    return Concat(*parts, output_field=TextField())
