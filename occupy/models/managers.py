"""The check that a model's ``objects`` has what each of its occupy mixins adds.

Each model mixin installs the manager of its own concern under ``objects``; a model
combining two of them inherits only the first one's (Django resolves managers by the
MRO), so the other's queryset methods would be missing until the first call.
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import models

__all__ = ["check_objects_manager"]


def _declared_by(model: type[models.Model]) -> type[models.Model] | None:
    """Return the class in ``model``'s MRO whose body declares ``objects``, or ``None``."""
    for base in model.__mro__:
        meta = base.__dict__.get("_meta")
        if meta is not None and any(m.name == "objects" for m in meta.local_managers):
            return base
    return None


def check_objects_manager(model: type[models.Model], mixin: type[models.Model],
                          queryset_mixin: type[Any], methods: str) -> list[checks.CheckMessage]:
    """Return ``occupy.E201`` when ``model``'s ``objects`` comes from another occupy
    mixin and its queryset lacks ``queryset_mixin``, the methods ``mixin`` adds.

    A manager the model (or an abstract model of the user's) declares itself is the
    user's choice and is not checked.
    """
    origin = _declared_by(model)
    if origin is None or origin is mixin or not origin.__module__.startswith("occupy."):
        return []
    manager = model._meta.managers_map.get("objects")
    if manager is None or isinstance(manager.get_queryset(), queryset_mixin):
        return []
    name = model._meta.object_name
    return [checks.Error(
        f"{name}.objects is the {type(manager).__name__} of {origin.__name__}, which has "
        f"no {methods}: the methods {mixin.__name__} adds.",
        hint=f"Declare objects = OccupyManager() on {name} (from occupy.models), or a "
             f"manager whose queryset mixes in {queryset_mixin.__name__}.",
        obj=model, id="occupy.E201",
    )]
