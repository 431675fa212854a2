"""``OccupyErrorsMiddleware``: occupy's conditions answered on any Django view, so that
no lock, conflict or store outage ever becomes a 500::

    MIDDLEWARE = [
        ...,
        "occupy.middleware.OccupyErrorsMiddleware",
    ]

A view that lets an occupy exception through (a plain Django view, or a DRF view with
DRF's default ``EXCEPTION_HANDLER``, which leaves exceptions it does not know to
Django) gets the status, JSON body and headers of the exception's row in the status
table (:mod:`occupy.http`): a ``VersionConflict`` from ``VersionedMixin.save()`` is
409 ``version_conflict`` with the row's current ``ETag``; ``Occupied`` 423 with
``Retry-After``; ``StoreUnavailable`` 503 with ``Retry-After``; an
``ImproperlyConfigured`` raised because ``settings.OCCUPY`` is wrong (on a server that
skips ``manage.py check``) 503, as :class:`~occupy.Misconfigured`. It uses Django's own
``process_exception`` hook: nothing of Django or DRF is patched. Other exceptions go on
to Django's handling untouched.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse

from occupy import http, telemetry
from occupy.checks import settings_misconfigured
from occupy.exceptions import OccupyError

__all__ = ["OccupyErrorsMiddleware"]


class OccupyErrorsMiddleware:
    """Answer the occupy exceptions a view raises with their row of the status table."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        """Pass the request on."""
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        """Return the status table's answer to an occupy exception, else ``None``."""
        exception = settings_misconfigured(exception) or exception
        if not isinstance(exception, OccupyError) or not isinstance(exception, http.ANSWERED):
            return None
        problem = http.answer(
            exception,
            requester=http.requester_pk(request),
            write=http.is_write(request.method or "GET"),
        )
        telemetry.http_response(problem.status, problem.code)
        response = JsonResponse(problem.body(), status=problem.status)
        for name, value in problem.headers.items():
            response[name] = value
        return response
