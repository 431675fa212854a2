"""Which occupy backend locks a model's objects: one answer for the model side, the
admin and Django REST framework.

Invariant: whatever locks an object's key (``obj.occupy()``, ``claim()``, the admin's
edit leases and its "being edited" column, DRF's write locks and edit leases) asks
:func:`model_backend`, so that one object's key lives in one store; two stores for one
key would exclude nothing. A view or model admin follows its model unless its own
``occupy_backend`` names another alias, which ``manage.py check`` warns of
(``occupy.W303``).
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage

from occupy.checks import alias_problem, backend_mismatch, misconfigured, unconfigured_alias

__all__ = ["backend_checks", "configured_backend", "model_backend"]

#: The alias of a model that names none (no ``OccupiableMixin``).
DEFAULT_ALIAS = "default"


def model_backend(model: type[Any] | None, alias: str | None = None) -> str:
    """Return the occupy backend alias that locks ``model``'s objects: ``alias`` when one
    is named, else the model's ``occupy_backend``
    (:class:`~occupy.models.OccupiableMixin`), else ``"default"``."""
    if alias is not None:
        return alias
    return str(getattr(model, "occupy_backend", None) or DEFAULT_ALIAS)


def configured_backend(user: Any, model: type[Any] | None) -> str:
    """Return the alias ``user`` (a view or model admin of occupy's) locks ``model``'s
    objects in: its own ``occupy_backend``, else the model's (:func:`model_backend`).
    Raise :class:`~occupy.Misconfigured`, naming whose attribute it is, when
    ``OCCUPY['BACKENDS']`` does not configure it."""
    own = getattr(user, "occupy_backend", None)
    alias = model_backend(model, own)
    problem = alias_problem(user if own is not None else model, "occupy_backend", alias)
    if problem is not None:
        raise misconfigured(problem)
    return alias


def backend_checks(user: Any, model: type[Any] | None, *, check_id: str) -> list[CheckMessage]:
    """Return the check messages of ``user``'s (a view class or a model admin of occupy's)
    ``occupy_backend``: ``check_id`` when it names an alias that is not configured,
    else ``occupy.W303`` when it names another alias than ``model``'s. Left to its
    model (``None``), nothing: the model's own check (``occupy.E203``) reports the
    model's alias."""
    alias = getattr(user, "occupy_backend", None)
    if alias is None:
        return []
    return unconfigured_alias(user, "occupy_backend", alias, check_id=check_id) or (
        backend_mismatch(user, alias, model, model_backend(model))
    )
