"""The DRF exceptions of occupy's HTTP contract (see :mod:`occupy.http`).

Each sets ``status_code``, ``default_detail`` (translatable, as DRF's are) and
``default_code`` and nothing else, like DRF's own; the extra body members (``holder``,
``current_version``, ``retry_after``) and headers (``ETag``, ``Retry-After``) of the
:class:`~occupy.http.Problem` travel on the exception as ``problem``, and
:class:`~occupy.rest_framework.mixins.OccupyErrorsMixin` or
:func:`~occupy.rest_framework.handlers.problem_exception_handler` put them on the
response. A custom ``EXCEPTION_HANDLER`` still sees ordinary ``APIException`` s.
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import status
from rest_framework.exceptions import APIException

from occupy.http import Problem

__all__ = [
    "FencedOutError",
    "InvalidClient",
    "InvalidKey",
    "InvalidTTL",
    "LeaseLostError",
    "LeaseTokenRequired",
    "Locked",
    "MalformedPreconditionError",
    "OccupyAPIException",
    "PreconditionFailed",
    "PreconditionRequired",
    "StoreUnavailableError",
    "VersionConflictError",
    "from_problem",
]


class OccupyAPIException(APIException):
    """Base of occupy's API exceptions; ``problem`` is the full answer.

    ``wait`` is the seconds of the answer's ``Retry-After`` (``None`` without one), as
    on DRF's ``Throttled``: DRF's own exception handler then sets the header, without
    occupy's.
    """

    problem: Problem | None = None
    wait: int | None = None

    def __init__(
        self, detail: str | None = None, code: str | None = None, problem: Problem | None = None
    ) -> None:
        super().__init__(detail, code)
        self.problem = problem
        retry_after = None if problem is None else problem.headers.get("Retry-After")
        if retry_after is not None and retry_after.isdigit():
            self.wait = int(retry_after)


class PreconditionFailed(OccupyAPIException):
    """``If-Match`` does not match the current version."""

    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = _("The object changed since you read it.")
    default_code = "precondition_failed"


class PreconditionRequired(OccupyAPIException):
    """A write that must be conditional came without ``If-Match`` or a body version."""

    status_code = status.HTTP_428_PRECONDITION_REQUIRED
    default_detail = _("This request must be conditional.")
    default_code = "precondition_required"


class MalformedPreconditionError(OccupyAPIException):
    """An ``If-Match`` header that is no list of entity tags."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = _("Malformed If-Match header.")
    default_code = "malformed_precondition"


class VersionConflictError(OccupyAPIException):
    """The body's version is stale, or another writer changed the same fields."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = _("The object changed since you read it.")
    default_code = "version_conflict"


class FencedOutError(OccupyAPIException):
    """The writer's lease was taken over or expired before the write."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = _("Your edit lease expired or was taken over.")
    default_code = "fenced_out"


class LeaseLostError(OccupyAPIException):
    """The presented lease token holds nothing any more."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = _("Your edit lease is no longer held.")
    default_code = "lease_lost"


class Locked(OccupyAPIException):
    """Someone else holds the object's lease."""

    status_code = status.HTTP_423_LOCKED
    default_detail = _("This object is being edited by someone else.")
    default_code = "locked"


class StoreUnavailableError(OccupyAPIException):
    """The lock store cannot be reached; nothing was written."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = _("The lock store cannot be reached right now.")
    default_code = "store_unavailable"


class LeaseTokenRequired(OccupyAPIException):
    """A lease request came without the lease's token."""

    status_code = status.HTTP_428_PRECONDITION_REQUIRED
    default_detail = _("Send the lease's token.")
    default_code = "lease_token_required"


class InvalidKey(OccupyAPIException):
    """The object's lock key cannot be built (its primary key), so it cannot be locked."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = _("This object cannot be locked.")
    default_code = "invalid_key"


class InvalidClient(OccupyAPIException):
    """A lease request named its client (``Occupy-Client``) with control characters."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = _("Invalid client name.")
    default_code = "invalid_client"


class InvalidTTL(OccupyAPIException):
    """A lease request asked for a ttl that is no number of seconds within bounds."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = _("Invalid ttl.")
    default_code = "invalid_ttl"


_BY_CODE: dict[str, type[OccupyAPIException]] = {
    cls.default_code: cls
    for cls in (
        PreconditionFailed,
        PreconditionRequired,
        MalformedPreconditionError,
        VersionConflictError,
        FencedOutError,
        LeaseLostError,
        Locked,
        LeaseTokenRequired,
        StoreUnavailableError,
        InvalidKey,
        InvalidTTL,
        InvalidClient,
    )
}


def from_problem(problem: Problem) -> OccupyAPIException:
    """Return the API exception that answers ``problem``."""
    return _BY_CODE[problem.code](problem.detail, problem.code, problem)
