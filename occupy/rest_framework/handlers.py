"""An optional RFC 9457 exception handler: occupy's answers as ``application/problem+json``::

    REST_FRAMEWORK = {
        "EXCEPTION_HANDLER": "occupy.rest_framework.handlers.problem_exception_handler",
    }

occupy's conditions get ``type`` (``OCCUPY["REST_FRAMEWORK"]["PROBLEM_TYPE_BASE"]``
followed by the code, or ``about:blank``), ``title``, ``status``, ``detail``,
``instance`` (the request path), ``code`` and the contract's extension members. Every
other exception goes to DRF's own handler unchanged.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from rest_framework.response import Response
from rest_framework.views import exception_handler

from occupy.conf import occupy_settings
from occupy.rest_framework.exceptions import OccupyAPIException

__all__ = ["problem_exception_handler"]

PROBLEM_JSON = "application/problem+json"


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponse | None:
    """Answer occupy's API exceptions as problem details; others as DRF does."""
    response = exception_handler(exc, context)
    problem = getattr(exc, "problem", None)
    if response is None or not isinstance(exc, OccupyAPIException) or problem is None:
        return response
    base = occupy_settings.REST_FRAMEWORK["PROBLEM_TYPE_BASE"]
    request = context.get("request")
    body = {
        "type": "about:blank" if base in (None, "about:blank") else f"{base}{problem.code}",
        "title": response.status_text,
        "status": response.status_code,
        "detail": problem.detail,
        "instance": None if request is None else request.path,
        "code": problem.code,
        **problem.extra,
    }
    headers = {**{name: value for name, value in response.items()
                  if name.lower() != "content-type"}, **problem.headers}
    return Response(body, status=response.status_code, headers=headers,
                    content_type=PROBLEM_JSON)
