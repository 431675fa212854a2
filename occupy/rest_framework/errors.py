"""How occupy's conditions reach a DRF client: :class:`OccupyErrorsMixin` for views, and
:func:`api_exception` for the exception handlers (:mod:`occupy.rest_framework.handlers`).

Every occupy exception a view lets through becomes its row of the status table
(:mod:`occupy.http`): never a 500; nor does a setting of occupy's that is wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework.response import Response

from occupy import http
from occupy.checks import settings_misconfigured
from occupy.exceptions import OccupyError
from occupy.http import Problem
from occupy.owners import owner_display
from occupy.rest_framework.exceptions import OccupyAPIException, from_problem

__all__ = ["OccupyErrorsMixin", "api_exception", "decorate"]

if TYPE_CHECKING:
    from rest_framework.views import APIView

    _APIView = APIView
else:
    _APIView = object


def api_exception(
    exc: Exception,
    *,
    display: Any = owner_display,
    from_if_match: bool = False,
    request: Any = None,
) -> Exception:
    """Return the API exception answering ``exc`` when it is one of the occupy errors
    of the status table, else ``exc`` itself (``request``: the request answered, whose
    user's own lease elsewhere is told as theirs). occupy's own settings, wrong where
    a request met them, are answered as :class:`~occupy.Misconfigured` (a 503)."""
    exc = settings_misconfigured(exc) or exc
    if isinstance(exc, OccupyError) and isinstance(exc, http.ANSWERED):
        problem = http.answer(
            exc,
            display=display,
            from_if_match=from_if_match,
            requester=http.requester_pk(request),
            write=request is None or http.is_write(request.method),
        )
        return from_problem(problem)
    return exc


def decorate(response: Response, exc: Exception) -> Response:
    """Add the problem's members (``code``, ``holder``, ``current_version``…) to a
    DRF-shaped body and its headers (``ETag``, ``Retry-After``) to ``response``."""
    problem: Problem | None = getattr(exc, "problem", None)
    if isinstance(exc, OccupyAPIException) and problem is not None:
        data = response.data
        if isinstance(data, dict) and "detail" in data and "type" not in data:
            response.data = {**data, "code": problem.code, **problem.extra}
        for name, value in problem.headers.items():
            if name not in response:
                response[name] = value
    return response


class OccupyErrorsMixin(_APIView):
    """Answer occupy's exceptions with the contract's status, body and headers.

    Occupy errors become :mod:`occupy.rest_framework.exceptions` before DRF's exception
    handler sees them (so a custom ``EXCEPTION_HANDLER`` still gets ``APIException`` s);
    afterwards the problem's members and headers are added to a DRF-shaped body.
    """

    #: Set while a write runs with a precondition from ``If-Match`` (a lost race is 412).
    occupy_if_match = False

    def get_owner_display(self, owner: str) -> str:
        """Return what clients are told of a holder (see
        :func:`occupy.owners.owner_display`): a user's name for an edit lease, else
        ``"someone else"``."""
        return owner_display(owner)

    def handle_exception(self, exc: Exception) -> Response:
        """Map occupy's exceptions to the contract, then let DRF answer."""
        exc = api_exception(
            exc,
            display=self.get_owner_display,
            from_if_match=self.occupy_if_match,
            request=getattr(self, "request", None),
        )
        problem = getattr(exc, "problem", None)
        if isinstance(exc, OccupyAPIException) and problem is not None:
            self.complete_problem(problem)
        return decorate(super().handle_exception(exc), exc)

    def complete_problem(self, problem: Problem) -> None:
        """Add what this view knows to ``problem`` before it is answered, whichever
        exception handler renders it (a hook: here, nothing)."""
