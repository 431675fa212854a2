"""The HTTP side of occupy, for any framework: the one table (:func:`problem_for`)
that turns every occupy condition into a status, a ``code``, headers and a body. The
table, condition by condition: docs/topics/rest-framework.md. The request headers it
answers are read by :mod:`occupy.preconditions`.

Invariants: a person is named only when the holder is somebody's edit lease;
``Retry-After`` is whole seconds, at least 1; a ``detail`` is in the language active
when the answer is made (``gettext``, named placeholders).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from django.utils.translation import gettext as _

from occupy.conf import occupy_settings
from occupy.exceptions import (
    ConflictError,
    FencedOut,
    LeaseLost,
    MalformedPrecondition,
    Misconfigured,
    Occupied,
    OccupyError,
    StoreUnavailable,
)
from occupy.leases import Holder
from occupy.owners import owner_display, parse_owner, same_user
from occupy.preconditions import etag_for
from occupy.versions import get_version_field

__all__ = [
    "ANSWERED",
    "Problem",
    "answer",
    "current_version",
    "holder_body",
    "invalid_client",
    "invalid_ttl",
    "lease_not_yours",
    "problem_for",
    "requester_pk",
    "retry_after",
    "unlockable",
]


@dataclass
class Problem:
    """What to answer for a condition: status, ``code``, a message, extra body members
    and headers. Every HTTP adapter of occupy renders this one shape."""

    status: int
    code: str
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        """Return the DRF-shaped body: ``detail`` and ``code``, then the extra members."""
        return {"detail": self.detail, "code": self.code, **self.extra}


def retry_after(holder: Holder | None, seconds: float | None = None) -> int:
    """Return whole seconds (at least 1) until ``holder``'s lease ends."""
    if seconds is None and holder is not None:
        seconds = (holder.expires_at - datetime.now(timezone.utc)).total_seconds()
    return max(1, math.ceil(seconds or 0))


def requester_pk(request: Any) -> Any:
    """Return the primary key of the user a request is made by (``None``: anonymous,
    or no request)."""
    return getattr(getattr(request, "user", None), "pk", None)


def _held_by(holder: Holder | None, display: Callable[[str], str], requester: object) -> str:
    """Return the 423's ``detail``: who edits the object, and where when it is in the
    admin site; the requesting user's own lease elsewhere is told as theirs, with what
    to do about it (an admin page of theirs holds it for its whole ttl)."""
    if holder is None:
        return _("This object is being edited by someone else; try again later.")
    parsed = parse_owner(holder.owner)
    mine = same_user(holder.owner, requester)
    if mine and parsed.admin:
        return _(
            "You are editing this object in the admin site (an open change page); save "
            "or leave it there, or try again later."
        )
    if mine:
        return _(
            "You hold this object's edit lease already, with another client or under a "
            "token this request did not send; send that token in %(header)s, or try "
            "again later."
        ) % {"header": occupy_settings.REST_FRAMEWORK["LEASE_HEADER"]}
    if parsed.admin:
        text = _("This object is being edited by %(holder)s in the admin site; try again later.")
    else:
        text = _("This object is being edited by %(holder)s; try again later.")
    return text % {"holder": display(holder.owner)}


def utc_text(moment: datetime) -> str:
    """Return ``moment`` in UTC as ISO 8601 with ``Z`` (``2026-11-28T09:05:00.123456Z``),
    as DRF writes a UTC date: every date occupy's HTTP answers carry has this form."""
    text = moment.astimezone(timezone.utc).isoformat()
    return text.removesuffix("+00:00") + "Z"


def holder_body(holder: Holder | None, display: Callable[[str], str]) -> dict[str, Any] | None:
    """Return what a client may see of a holder: a display name, since and until when
    (:func:`utc_text`); never the owner string's secrets, a token or an email."""
    if holder is None:
        return None
    return {
        "owner_display": display(holder.owner),
        "since": None if holder.since is None else utc_text(holder.since),
        "expires_at": utc_text(holder.expires_at),
    }


def _unavailable(exc: StoreUnavailable, write: bool) -> Problem:
    """Return the 503 for a store that cannot be used, or for a view that cannot lock
    as configured (:class:`Misconfigured`): the latter without ``Retry-After``, since a
    retry meets the same settings until the site is fixed."""
    if isinstance(exc, Misconfigured):
        return Problem(
            503,
            "store_unavailable",
            _("This object cannot be locked as the site is configured; nothing was written.")
            if write
            else _("This object cannot be locked as the site is configured."),
        )
    return Problem(
        503,
        "store_unavailable",
        _("The lock store cannot be reached right now; nothing was written. Try again shortly.")
        if write
        else _("The lock store cannot be reached right now. Try again shortly."),
        headers={"Retry-After": "1"},
    )


def problem_for(
    exc: OccupyError,
    *,
    display: Callable[[str], str] = str,
    current_version: int | None = None,
    from_if_match: bool = False,
    requester: object = None,
    write: bool = True,
) -> Problem:
    """Return the :class:`Problem` for an occupy exception (see the module's table).

    ``current_version`` is the row's version now, for the ``ETag`` of a conflict;
    ``from_if_match`` says a version conflict came from ``If-Match`` (412) rather than
    from the body (409); ``requester`` is the primary key of the user asking, whose own
    lease elsewhere is told as theirs; ``write`` says the request asked to change
    something (a read that fails is not told that "nothing was written").
    """
    if isinstance(exc, MalformedPrecondition):
        return Problem(400, "malformed_precondition", str(exc))
    if isinstance(exc, Occupied):
        holder = exc.holder
        seconds = retry_after(holder, None if holder is not None else exc.retry_after)
        if holder is not None and parse_owner(holder.owner).write:
            # Another request's write that outlasted the wait: nobody is editing. Writes
            # take milliseconds and the queue ahead about the write wait; what is left of
            # the write lock's ttl only bounds a write that hung, so it is no advice.
            seconds = min(seconds, retry_after(None, occupy_settings.REST_FRAMEWORK["WRITE_WAIT"]))
            return Problem(
                423,
                "locked",
                _("Another write to this object is taking longer than usual; try again shortly."),
                extra={"holder": None, "retry_after": seconds},
                headers={"Retry-After": str(seconds)},
            )
        return Problem(
            423,
            "locked",
            _held_by(holder, display, requester),
            extra={"holder": holder_body(holder, display), "retry_after": seconds},
            headers={"Retry-After": str(seconds)},
        )
    if isinstance(exc, StoreUnavailable):
        return _unavailable(exc, write)
    if isinstance(exc, FencedOut):
        return Problem(
            409,
            "fenced_out",
            _("Your edit lease expired or was taken over before this write; nothing was written."),
        )
    if isinstance(exc, LeaseLost):
        return Problem(
            409,
            "lease_lost",
            _("Your edit lease is no longer held: it expired, was released or was taken over."),
        )
    if isinstance(exc, ConflictError):
        headers = {}
        etag = etag_for(current_version)
        if etag is not None:
            headers["ETag"] = etag
        extra = {"current_version": current_version, "fields": list(exc.fields)}
        detail = _("The object changed since you read it; read it again and resend your change.")
        if from_if_match:
            return Problem(412, "precondition_failed", detail, extra, headers)
        return Problem(409, "version_conflict", detail, extra, headers)
    raise TypeError(f"occupy.http has no answer for {type(exc).__name__}: {exc}")


#: The occupy exceptions :func:`problem_for` answers; any other is a bug or a
#: misconfiguration, and is left to the framework (a 500 that names it).
ANSWERED = (MalformedPrecondition, ConflictError, LeaseLost, Occupied, StoreUnavailable)


def current_version(exc: OccupyError) -> int | None:
    """Return the version the row of a conflict has now (for its ``ETag``), or ``None``."""
    model = getattr(exc, "model", None)
    pk = getattr(exc, "pk", None)
    if (
        not isinstance(exc, ConflictError)
        or model is None
        or pk is None
        or (version_field := get_version_field(model)) is None
    ):
        return None
    value = model._base_manager.filter(pk=pk).values_list(version_field.attname, flat=True).first()
    return None if value is None else int(value)


def answer(
    exc: OccupyError,
    *,
    display: Callable[[str], str] = owner_display,
    from_if_match: bool = False,
    requester: object = None,
    write: bool = True,
) -> Problem:
    """Return the :class:`Problem` for ``exc``, with the row's current version read for
    a conflict's ``ETag`` (:func:`problem_for` with what it needs looked up)."""
    return problem_for(
        exc,
        display=display,
        current_version=current_version(exc),
        from_if_match=from_if_match,
        requester=requester,
        write=write,
    )


def is_write(method: str) -> bool:
    """Return whether an HTTP ``method`` asks to change something (not ``GET``,
    ``HEAD``, ``OPTIONS`` or ``TRACE``)."""
    return method.upper() not in ("GET", "HEAD", "OPTIONS", "TRACE")


def precondition_required(method: str, accepted: list[str]) -> Problem:
    """Return the 428 for a write that must be conditional and is not."""
    return Problem(
        428,
        "precondition_required",
        _(
            "%(method)s on this resource must be conditional: send If-Match with the ETag "
            "from GET, or the %(field)s field."
        )
        % {"method": method, "field": repr(accepted[-1])},
        extra={"accepted": accepted},
        headers={"Cache-Control": "no-store"},
    )


def lease_not_yours() -> Problem:
    """Return the 409 for a lease token presented by a user who did not take the lease
    (the lease is left as it is)."""
    return Problem(
        409,
        "lease_lost",
        _(
            "You hold no lease with this token: it belongs to "
            "another user's lease, which is left as it is."
        ),
    )


def unlockable(error: ValueError) -> Problem:
    """Return the 400 for an object whose lock key cannot be built (its primary key)."""
    return Problem(
        400, "invalid_key", _("This object cannot be locked: %(error)s") % {"error": error}
    )


def invalid_client(header: str, error: ValueError) -> Problem:
    """Return the 400 for a client label (``header``) that cannot be kept with a lease's
    owner: it holds control characters (see :func:`occupy.validation.check_client`)."""
    detail = _("The %(header)s header is not usable: %(error)s")
    return Problem(400, "invalid_client", detail % {"header": header, "error": error})


def invalid_ttl(longest: float, value: object) -> Problem:
    """Return the 400 for a lease request's ttl that is no number of seconds from 1 to
    ``longest``."""
    detail = _("ttl must be a number of seconds from 1 to %(longest)s, not %(value)s.")
    return Problem(
        400, "invalid_ttl", detail % {"longest": f"{longest:g}", "value": repr(str(value)[:40])}
    )


def lease_token_required(*, header: str = "", field: str = "") -> Problem:
    """Return the 428 for a lease request without its token (header or form field)."""
    if field:
        detail = _("Send the lease's token in the %(field)s form field.") % {"field": repr(field)}
    else:
        detail = _("Send the lease's token in the %(header)s header.") % {"header": header}
    return Problem(428, "lease_token_required", detail)
