"""The default and the longest edit lease of a view of
:class:`~occupy.rest_framework.mixins.EditLeaseMixin`: its own ``lease_ttl`` and
``lease_ttl_max``, else the ``REST_FRAMEWORK`` settings'.

Invariant: ``manage.py check`` (``occupy.E304``) and a request (``Misconfigured``, a
503) refuse the same values in the same words: a value that is no duration, and a
default longer than the longest lease.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error
from django.core.exceptions import ImproperlyConfigured

from occupy.checks import Rule, checked_attribute, misconfigured, optional
from occupy.conf import occupy_settings
from occupy.validation import check_ttl

__all__ = ["LEASE_DURATIONS", "lease_ttl_errors", "lease_ttls"]

#: The lease's durations a view reads, each with its rule (``None``: the setting).
LEASE_DURATIONS: dict[str, Rule] = {
    "lease_ttl": optional(check_ttl),
    "lease_ttl_max": optional(check_ttl),
}


def _ttls(view: Any) -> tuple[float, float]:
    """Return the default and the longest lease of ``view`` (a view or its class, whose
    ``lease_ttl`` and ``lease_ttl_max`` are durations or ``None``): its own, else the
    settings'."""
    conf = occupy_settings.REST_FRAMEWORK
    default, longest = view.lease_ttl, view.lease_ttl_max
    return (
        float(conf["LEASE_TTL"] if default is None else default),
        float(conf["LEASE_TTL_MAX"] if longest is None else longest),
    )


def _longer_default(view: Any) -> str | None:
    """Return the sentence saying that ``view``'s default lease is longer than its
    longest, or ``None``."""
    default, longest = _ttls(view)
    if default <= longest:
        return None
    name = view.__name__ if isinstance(view, type) else type(view).__name__
    return (
        f"{name}.lease_ttl ({default:g} s) is above the longest lease ({longest:g} s, "
        "lease_ttl_max or LEASE_TTL_MAX): a lease asked for without a ttl would outlive "
        "the longest one allowed."
    )


def lease_ttls(view: Any) -> tuple[float, float]:
    """Return the default and the longest lease of ``view``, in seconds; raise
    :class:`~occupy.Misconfigured` when one is not a duration, or the default is the
    longer."""
    for name, rule in LEASE_DURATIONS.items():
        checked_attribute(view, name, rule)
    problem = _longer_default(view)
    if problem is not None:
        raise misconfigured(problem)
    return _ttls(view)


def lease_ttl_errors(cls: type[Any], messages: list[CheckMessage]) -> list[CheckMessage]:
    """Return ``messages`` (the view class ``cls``'s other checks) with ``occupy.E304``
    for a default lease longer than the longest one, unless one of them already says
    that a duration is not one."""
    if any(m.id == "occupy.E304" for m in messages):
        return messages
    try:
        problem = _longer_default(cls)
    except ImproperlyConfigured:
        return messages  # the setting itself: occupy.E007 says it
    if problem is None:
        return messages
    return [
        *messages,
        Error(problem, hint="Lower lease_ttl or raise lease_ttl_max.", obj=cls, id="occupy.E304"),
    ]
