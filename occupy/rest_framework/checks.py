"""The checks of occupy's DRF views in the URLconf, said by ``manage.py check`` instead
of failing on a request: a view on a model with a composite primary key, which Django
REST framework does not look up (``occupy.E301``), and the view's own attributes
(:meth:`~occupy.rest_framework.mixins.OccupiedWritesMixin.occupy_checks`: its
``occupy_backend``, ``occupy.E302`` and ``occupy.W303``; its durations,
``occupy.E304``).

The views are found as Django's own URL checks and drf-spectacular find them: by
walking the URLconf's patterns to the view classes their callbacks carry (``cls`` for
DRF's ``as_view()``, ``view_class`` for Django's), with the attributes ``as_view()``
was given. A URLconf that cannot be loaded is left to Django's own check
(``urls.E…``, or the import error it raises): this one reports nothing for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, register
from django.core.exceptions import FieldDoesNotExist
from django.urls import URLPattern, URLResolver, get_resolver

from occupy.checks import composite_pk_unsupported
from occupy.rest_framework.mixins import OccupiedWritesMixin, OccupyErrorsMixin

__all__ = ["check_views"]


def _patterns(resolver: URLResolver) -> list[Any]:
    """Return ``resolver``'s patterns, or none when its module cannot be loaded."""
    try:
        return list(resolver.url_patterns)
    except Exception:  # any error of the user's URLconf: Django's own check reports it
        return []


def _views(patterns: list[Any]) -> Iterator[tuple[type[Any], dict[str, Any]]]:
    """Yield ``(view class, as_view() keyword arguments)`` for every class-based view
    the patterns lead to."""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _views(_patterns(pattern))
        elif isinstance(pattern, URLPattern):
            callback = pattern.callback
            cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
            if isinstance(cls, type):
                given = getattr(callback, "initkwargs", None)
                if given is None:
                    given = getattr(callback, "view_initkwargs", None)
                yield cls, dict(given) if isinstance(given, dict) else {}


def _occupy_overrides(cls: type[Any], given: dict[str, Any]) -> dict[str, Any]:
    """Return the occupy attributes among the ``as_view()`` arguments ``given``."""
    names = {"occupy_backend", *getattr(cls, "occupy_durations", {})}
    return {name: value for name, value in given.items() if name in names}


def _as_configured(cls: type[Any], overrides: dict[str, Any]) -> type[Any]:
    """Return ``cls`` as ``as_view()`` configures it with the occupy attributes
    ``overrides``: a subclass of the same name that sets them, else ``cls`` itself."""
    if not overrides:
        return cls
    return type(cls.__name__, (cls,), {**overrides, "__module__": cls.__module__})


def _unique_lookup(model: type[Any], name: str) -> bool:
    """Return whether ``name`` is a unique field of ``model`` other than its primary key."""
    if name == "pk":
        return False
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return False
    return bool(getattr(field, "unique", False)) and not field.primary_key


def _composite(cls: type[Any]) -> list[CheckMessage]:
    model = getattr(getattr(cls, "queryset", None), "model", None)
    if model is None or _unique_lookup(model, getattr(cls, "lookup_field", "pk")):
        return []
    return composite_pk_unsupported(
        model,
        cls,
        "Django REST framework (which looks a row up by its lookup_field, here not a unique field)",
    )


@register(Tags.urls)
def check_views(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Return the messages of each view of occupy's in the URLconf: ``occupy.E301``
    when its model has a composite primary key, unless it looks rows up by a unique
    field (``lookup_field``) other than the primary key; and those of its own
    attributes (``occupy.E302``, ``occupy.W303``, ``occupy.E304``)."""
    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    messages: list[CheckMessage] = []
    seen: set[tuple[type[Any], str]] = set()
    for cls, given in _views(_patterns(get_resolver())):
        if not issubclass(cls, OccupyErrorsMixin):
            continue
        overrides = _occupy_overrides(cls, given)
        mark = (cls, repr(sorted(overrides.items())))
        if mark in seen:  # a router maps one viewset to several patterns
            continue
        seen.add(mark)
        view = _as_configured(cls, overrides)
        messages += _composite(view)
        if issubclass(view, OccupiedWritesMixin):
            messages += view.occupy_checks()
    return messages
