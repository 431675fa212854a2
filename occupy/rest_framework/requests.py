"""What a request to the edit-lease endpoints sends (:mod:`occupy.rest_framework.leases`):
its body, which must be an object, and a number of seconds in it.

Invariants: a body that is no object is refused as DRF's serializers refuse it (400,
``non_field_errors``), never read as no body; a number of seconds is a JSON number or
ASCII digits from a form, finite, never ``true``, ``"nan"`` or digits of another script.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.request import Request

__all__ = ["lease_request_body", "seconds"]

_NUMBER = re.compile(r"^\d{1,9}(\.\d{1,9})?$", re.ASCII)


def lease_request_body(request: Request) -> Mapping[str, Any]:
    """Return the body of a lease request, an object (a JSON object or a form); 400
    as DRF's serializers answer a body of any other kind (``[]``, ``"x"``, ``null``,
    ``42``), never read as no body."""
    data: Any = request.data
    if not isinstance(data, Mapping):
        # DRF's own refusal of a body that is no object, with its message and shape.
        serializers.Serializer(data=data).is_valid(raise_exception=True)
    return data  # type: ignore[no-any-return]


def seconds(value: Any) -> float | None:
    """Return ``value`` as a number of seconds if it is one (a JSON number, or digits
    from a form), else ``None``: ``true``, ``"nan"``, ``"1e-300"`` are not."""
    if isinstance(value, str):
        return float(value) if _NUMBER.match(value) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
