"""The check that a model's own ``objects`` has what each of its occupy mixins adds.

Every occupy model mixin installs the same :class:`~occupy.models.OccupyManager`, so a
model that declares no manager has every method whatever mixins it combines. A
manager the model (or an abstract model of the user's) declares itself replaces it,
and must keep the methods of the model's mixins: else ``manage.py check`` says which
are missing (``occupy.E201``) before the first call finds out.
"""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.db import models

__all__ = ["check_objects_manager"]


def check_objects_manager(
    model: type[models.Model], mixin: type[models.Model], queryset_mixin: type[Any], methods: str
) -> list[checks.CheckMessage]:
    """Return ``occupy.E201`` when ``model``'s ``objects`` has a queryset without
    ``queryset_mixin``: the methods ``methods`` that ``mixin`` adds."""
    manager = model._meta.managers_map.get("objects")
    if manager is None or isinstance(manager.get_queryset(), queryset_mixin):
        return []
    name = model._meta.object_name
    return [
        checks.Error(
            f"{name}.objects is a {type(manager).__name__}, whose queryset has no {methods}: "
            f"the methods {mixin.__name__} adds.",
            hint=f"Leave objects undeclared ({mixin.__name__} installs OccupyManager), or mix "
            f"{queryset_mixin.__name__} (OccupyQuerySetMixin has every occupy method) "
            f"into its queryset: objects = YourQuerySet.as_manager().",
            obj=model,
            id="occupy.E201",
        )
    ]
