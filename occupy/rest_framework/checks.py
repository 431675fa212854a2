"""The check of occupy's DRF views in the URLconf: Django REST framework does not look
up a row by a composite primary key, so a view of occupy's on such a model is reported
by ``manage.py check`` (``occupy.E301``) instead of failing on its first request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.core.checks import CheckMessage, Tags, register
from django.core.exceptions import FieldDoesNotExist
from django.urls import URLPattern, URLResolver, get_resolver

from occupy.checks import composite_pk_unsupported
from occupy.rest_framework.mixins import OccupyErrorsMixin

__all__ = ["check_views"]


def _view_classes(patterns: list[Any]) -> Iterator[type[Any]]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _view_classes(pattern.url_patterns)
        elif isinstance(pattern, URLPattern):
            cls = getattr(pattern.callback, "cls", None)
            if isinstance(cls, type):
                yield cls


def _unique_lookup(model: type[Any], name: str) -> bool:
    """Return whether ``name`` is a unique field of ``model`` other than its primary key."""
    if name == "pk":
        return False
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return False
    return bool(getattr(field, "unique", False)) and not field.primary_key


@register(Tags.urls)
def check_views(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Return ``occupy.E301`` for each view of occupy's in the URLconf whose model has a
    composite primary key, unless it looks rows up by a unique field (``lookup_field``)
    other than the primary key."""
    messages: list[CheckMessage] = []
    seen: set[type[Any]] = set()
    for cls in _view_classes(get_resolver().url_patterns):
        if cls in seen or not issubclass(cls, OccupyErrorsMixin):
            continue
        seen.add(cls)
        model = getattr(getattr(cls, "queryset", None), "model", None)
        if model is None or _unique_lookup(model, getattr(cls, "lookup_field", "pk")):
            continue
        messages += composite_pk_unsupported(
            model,
            cls,
            "Django REST framework (which looks a row up by its lookup_field, "
            "here not a unique field)",
        )
    return messages
