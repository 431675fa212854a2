"""Exception handlers that answer occupy's conditions on *any* DRF view, also one with
none of occupy's mixins (a plain ``ModelViewSet`` of a ``VersionedMixin`` model)::

    REST_FRAMEWORK = {
        # DRF-shaped bodies ({"detail", "code", ...}):
        "EXCEPTION_HANDLER": "occupy.rest_framework.handlers.exception_handler",
        # or RFC 9457 problem details (application/problem+json):
        "EXCEPTION_HANDLER": "occupy.rest_framework.handlers.problem_exception_handler",
    }

Both turn every occupy exception of the status table (:mod:`occupy.http`) into its
status, body and headers, and give every other exception to DRF's own handler. With
DRF's default handler kept, :class:`occupy.middleware.OccupyErrorsMiddleware` answers
the occupy exceptions DRF leaves unhandled instead.

``problem_exception_handler`` gives occupy's conditions ``type``
(``OCCUPY["REST_FRAMEWORK"]["PROBLEM_TYPE_BASE"]`` followed by the code, or
``about:blank``), ``title``, ``status``, ``detail``, ``instance`` (the request path),
``code`` and the contract's extension members, as ``application/problem+json`` when
DRF's content negotiation chose a JSON renderer; a renderer of another kind (the
browsable API's ``text/html``) renders the same members under its own content type.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from occupy.conf import occupy_settings
from occupy.rest_framework.errors import api_exception, decorate
from occupy.rest_framework.exceptions import OccupyAPIException

__all__ = ["exception_handler", "problem_exception_handler"]

PROBLEM_JSON = "application/problem+json"


def _display(context: dict[str, Any]) -> Any:
    view = context.get("view")
    display = getattr(view, "get_owner_display", None)
    if display is None:
        from occupy.owners import owner_display

        return owner_display
    return display


def exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponse | None:
    """Answer occupy's exceptions as the status table says (DRF-shaped bodies), others
    as DRF's default handler does."""
    exc = api_exception(
        exc,
        display=_display(context),
        from_if_match=getattr(context.get("view"), "occupy_if_match", False),
        request=context.get("request"),
    )
    response = drf_exception_handler(exc, context)
    if isinstance(response, Response):
        decorate(response, exc)
    return response


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponse | None:
    """Answer occupy's exceptions as problem details; others as DRF does."""
    exc = api_exception(
        exc,
        display=_display(context),
        from_if_match=getattr(context.get("view"), "occupy_if_match", False),
        request=context.get("request"),
    )
    response = drf_exception_handler(exc, context)
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
    headers = {
        **{name: value for name, value in response.items() if name.lower() != "content-type"},
        **problem.headers,
    }
    return Response(
        body,
        status=response.status_code,
        headers=headers,
        content_type=PROBLEM_JSON if _renders_json(request) else None,
    )


def _renders_json(request: Any) -> bool:
    """Return whether the renderer DRF chose for ``request`` writes JSON, which a
    problem document's media type may then name; any other renderer (the browsable
    API's HTML) keeps its own content type."""
    renderer = getattr(request, "accepted_renderer", None)
    media_type = str(getattr(renderer, "media_type", "application/json"))
    return media_type == "application/json" or media_type.endswith("+json")
