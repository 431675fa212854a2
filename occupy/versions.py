"""Where a model keeps its version: the one home of the version field's name, read by
the model side, the admin and the HTTP integrations alike (no module here imports a
model, so the HTTP layer reads versions before the app registry is ready).

A model's version field is the concrete field its ``version_field_name`` names
(:class:`~occupy.models.VersionedMixin`'s ``"version"`` unless the model names its
own); a model without that attribute is read at ``"version"``.
"""

from __future__ import annotations

from typing import Any

from django.db import models

__all__ = ["DEFAULT_VERSION_FIELD", "get_version", "get_version_field", "get_version_name"]

#: The version field's name when a model does not name another.
DEFAULT_VERSION_FIELD = "version"


def get_version_field(model: type[models.Model]) -> models.Field[Any, Any] | None:
    """Return ``model``'s version field (the concrete field its ``version_field_name``
    names, else ``"version"``), or ``None`` when it has none."""
    name = get_version_name(model)
    return next((f for f in model._meta.concrete_fields if f.name == name), None)


def get_version_name(model: type[models.Model]) -> str:
    """Return the name of ``model``'s version field (whether it has one or not)."""
    return str(getattr(model, "version_field_name", DEFAULT_VERSION_FIELD))


def get_version(instance: models.Model) -> Any:
    """Return the version ``instance`` carries (loaded, read if deferred, or set as a
    precondition), or ``None`` when its model has no version field."""
    field = get_version_field(type(instance))
    return None if field is None else getattr(instance, field.attname)
