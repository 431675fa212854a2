"""The lock key of a model instance: ``"<app_label>.<model_name>:<pk>"``, shortened
with a digest when it would be too long (the format is :mod:`occupy.keys`'s).

The database backend links a claim on such a key to the instance (the ``Occupation``
row's content type and object id), which is what ``occupied()``, ``free()`` and
``claim()`` query.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from occupy import keys

__all__ = ["concrete_model", "lock_model", "object_key"]


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
    ends with a digest of the primary key (see :mod:`occupy.keys`).
    """
    if pk is None:
        raise ValueError(
            f"This {model._meta.object_name} has no primary key yet: save it before "
            "locking it."
        )
    return keys.object_key(lock_model(model)._meta.label_lower, pk)
