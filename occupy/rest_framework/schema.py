"""OpenAPI for occupy's DRF mixins, through drf-spectacular (imported only when it is
installed: ``OccupyConfig.ready()`` loads this module then).

Every view that uses the mixins lists, without any ``extend_schema`` of its own, its
304/400/403/409/412/423/428/503 answers with
:class:`~occupy.rest_framework.serializers.OccupyErrorSerializer`, the ``If-Match``,
``If-None-Match``, ``Occupy-Lease``, ``Occupy-Client`` and (taking a lease) ``Prefer``
request headers and the ``ETag``, ``Retry-After`` and ``Preference-Applied`` response
headers, the lease endpoints' own bodies, and a 409/412 body whose ``current`` is the
view's own serializer. Answers are
added with ``setdefault``, so a user's ``extend_schema(responses=…)`` still wins.

It works by :class:`OccupyViewExtension`, which gives each such view a schema class
composed of :class:`OccupyAutoSchemaMixin` and the view's own schema class. Where
another view extension already matches a view (drf-spectacular applies only one), use
:class:`OccupyAutoSchema` (or the mixin on your own class) as the view's ``schema`` or as
``DEFAULT_SCHEMA_CLASS``.
"""

from __future__ import annotations

from occupy.extras import require

require(
    "drf_spectacular",
    feature="occupy.rest_framework.schema",
    extra="drf",
    package="drf-spectacular",
)

import functools  # noqa: E402
from typing import TYPE_CHECKING, Any, Final  # noqa: E402

from drf_spectacular.extensions import OpenApiViewExtension  # noqa: E402
from drf_spectacular.openapi import AutoSchema  # noqa: E402
from drf_spectacular.plumbing import get_class  # noqa: E402
from drf_spectacular.utils import OpenApiParameter  # noqa: E402

from occupy.conf import occupy_settings  # noqa: E402
from occupy.rest_framework.conditional import CURRENT  # noqa: E402
from occupy.rest_framework.leases import LEASE_ACTIONS  # noqa: E402
from occupy.rest_framework.mixins import (  # noqa: E402
    ConditionalMixin,
    OccupiedWritesMixin,
    OccupyErrorsMixin,
)
from occupy.rest_framework.serializers import (  # noqa: E402
    HolderBodySerializer,
    LeaseReleaseSerializer,
    LeaseRequestSerializer,
    LeaseSerializer,
    LeaseTakeoverSerializer,
    LeaseTokenSerializer,
    OccupyErrorSerializer,
)

__all__ = ["OccupyAutoSchema", "OccupyAutoSchemaMixin", "OccupyViewExtension"]

if TYPE_CHECKING:
    _AutoSchema = AutoSchema
else:
    _AutoSchema = object

_WRITES = ("update", "partial_update", "destroy")
_LEASE_ACTIONS = LEASE_ACTIONS
#: The lease actions that take a ``ttl`` (and may answer 400 ``invalid_ttl``).
_TTL_ACTIONS = ("lease", "renew_lease", "takeover_lease")
#: The lease actions that need the lease's token.
_TOKEN_ACTIONS = ("renew_lease", "end_lease", "release_lease")
_DESCRIPTIONS = {
    "304": "Not modified: If-None-Match matches the current ETag.",
    "400": "Bad request: a malformed If-Match or lease token, or If-Match and the body's "
    "version naming different versions (malformed_precondition); a ttl that is no "
    "number of seconds in range (invalid_ttl); an object that cannot be locked "
    "(invalid_key); a client name with control characters (invalid_client).",
    "403": "Forbidden: taking over another user's edit lease needs the takeover permission.",
    "503": "Service unavailable: the lock store cannot be reached; nothing was written. "
    "See Retry-After.",
    "409": "Conflict: the body's version is stale (version_conflict, with the object as "
    "it is now in current), or the edit lease was lost or taken over (lease_lost, "
    "fenced_out).",
    "412": "Precondition failed: If-Match does not match the current version, or "
    "If-None-Match matches it. The body carries the object as it is now (current) and "
    "the ETag header its version: apply your change to it and send it again.",
    "423": "Locked: someone else holds the object's edit lease; see Retry-After.",
    "428": "Precondition required: send If-Match (or the version), or the lease token.",
}


def _lease_codes(action: str) -> list[str]:
    """Return the answers a lease endpoint's ``action`` adds, by status code."""
    codes = ["503"]
    if action in ("lease", "takeover_lease"):
        codes += ["400", "409", "423"]
    if action == "takeover_lease":
        codes.append("403")
    if action in _TTL_ACTIONS:
        codes.append("400")
    if action in _TOKEN_ACTIONS:
        codes += ["400", "409", "428"]
    return sorted(set(codes))


class OccupyAutoSchemaMixin(_AutoSchema):
    """Add occupy's headers and answers to a drf-spectacular ``AutoSchema``."""

    def _occupy_action(self) -> str | None:
        action = getattr(self.view, "action", None)
        if action is not None:
            return str(action)
        return {
            "PUT": "update",
            "PATCH": "partial_update",
            "DELETE": "destroy",
            "GET": "retrieve",
        }.get(self.method)

    def _occupy_codes(self) -> list[str]:
        """Return the answers this operation adds, by status code."""
        view, action = self.view, self._occupy_action()
        if action in _LEASE_ACTIONS:
            return _lease_codes(action)
        codes: list[str] = []
        if isinstance(view, ConditionalMixin):
            if action == "retrieve":
                codes.append("304")
            if action in _WRITES:
                codes += ["400", "409", "412"]
                if self.method in view.get_precondition_required():
                    codes.append("428")
        if isinstance(view, OccupiedWritesMixin) and action in _WRITES:
            codes += ["400", "409", "423", "503"]
        return sorted(set(codes))

    def get_override_parameters(self) -> list[Any]:
        """Add the request headers the mixins read and the response headers they send."""
        params = list(super().get_override_parameters())
        view, action = self.view, self._occupy_action()
        lease_header = occupy_settings.REST_FRAMEWORK["LEASE_HEADER"]
        header: Final = "header"  # OpenApiParameter.HEADER, as the literal the stubs ask
        if action in _LEASE_ACTIONS:
            if action in ("lease", "renew_lease", "end_lease", "takeover_lease"):
                params.append(
                    OpenApiParameter(
                        lease_header,
                        str,
                        header,
                        required=action in _TOKEN_ACTIONS,
                        description="The lease's token: yours only (another user's gets 409). "
                        "POST: present it to get the same lease back, extended, "
                        "without a new level.",
                    )
                )
            if action == "lease":
                params.append(
                    OpenApiParameter(
                        "Prefer",
                        str,
                        header,
                        description="'wait=N' (RFC 7240): wait up to N seconds (at most "
                        f"{occupy_settings.REST_FRAMEWORK['LEASE_WAIT_MAX']}) in the object's "
                        "first-come-first-served queue while someone else holds it; 423 "
                        "only once the wait is spent.",
                    )
                )
                params.append(
                    OpenApiParameter(
                        "Preference-Applied",
                        str,
                        header,
                        response=[200, 201, 423],
                        description="'wait=N': the wait this request was granted.",
                    )
                )
            if action in ("lease", "takeover_lease"):
                params.append(
                    OpenApiParameter(
                        occupy_settings.REST_FRAMEWORK["CLIENT_HEADER"],
                        str,
                        header,
                        description="Names your client (a tab, a device), up to 64 "
                        "characters without control characters: kept with the lease's "
                        "owner.",
                    )
                )
            params.append(
                OpenApiParameter(
                    "Retry-After",
                    int,
                    header,
                    response=[423, 503],
                    description="Seconds until the lease ends (423), or to try again (503).",
                )
            )
            return params
        if isinstance(view, ConditionalMixin):
            if action == "retrieve":
                params.append(
                    OpenApiParameter(
                        "If-None-Match",
                        str,
                        header,
                        description="An ETag from an earlier GET: 304 while it is current.",
                    )
                )
                params.append(
                    OpenApiParameter(
                        "ETag",
                        str,
                        header,
                        response=[200, 304],
                        description="The object's version.",
                    )
                )
            if action in _WRITES:
                required = self.method in view.get_precondition_required()
                params.append(
                    OpenApiParameter(
                        "If-Match",
                        str,
                        header,
                        description="The ETag you read ('*' for any). "
                        + (
                            "Required unless the body carries the version (else 428)."
                            if required
                            else "Optional."
                        ),
                    )
                )
                params.append(
                    OpenApiParameter(
                        "ETag",
                        str,
                        header,
                        response=[200, 409, 412],
                        description="The object's version now.",
                    )
                )
        if isinstance(view, OccupiedWritesMixin) and action in _WRITES:
            params.append(
                OpenApiParameter(
                    lease_header,
                    str,
                    header,
                    description="Write under this edit lease (its token); without it the "
                    "write is refused with 423 while someone else holds one.",
                )
            )
            params.append(
                OpenApiParameter(
                    "Retry-After",
                    int,
                    header,
                    response=[423, 503],
                    description="Seconds until the lease ends (423), or to try again (503).",
                )
            )
        return params

    def get_request_serializer(self) -> Any:
        """Return the lease endpoints' request body; others as usual."""
        action = self._occupy_action()
        if action in _LEASE_ACTIONS:
            if self.method in ("GET", "DELETE"):
                return None
            return LeaseReleaseSerializer if action == "release_lease" else LeaseRequestSerializer
        return super().get_request_serializer()

    def get_response_serializers(self) -> Any:
        """Return the lease endpoints' answers; others as usual."""
        action = self._occupy_action()
        if action in _LEASE_ACTIONS:
            if self.method == "GET":
                return HolderBodySerializer
            if self.method == "DELETE" or action == "release_lease":
                return {204: None}
            if self.method == "PATCH":
                return LeaseSerializer
            if action == "takeover_lease":
                return {201: LeaseTakeoverSerializer}
            return {200: LeaseTokenSerializer, 201: LeaseTokenSerializer}
        return super().get_response_serializers()

    def get_operation(self, *args: Any, **kwargs: Any) -> Any:
        """Add the contract's answers the operation does not list yet (setdefault)."""
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        codes = self._occupy_codes()
        if not codes:
            return operation
        ref = self.resolve_serializer(OccupyErrorSerializer, "response").ref
        headers = {
            "ETag": {"schema": {"type": "string"}},
            "Retry-After": {"schema": {"type": "integer"}},
        }
        conflict = self._occupy_conflict_schema(ref)
        responses = operation.setdefault("responses", {})
        for code in codes:
            answer: dict[str, Any] = {"description": _DESCRIPTIONS[code]}
            if code in ("409", "412") and conflict is not None:
                answer["content"] = {"application/json": {"schema": conflict}}
            elif code != "304":
                answer["content"] = {"application/json": {"schema": ref}}
            if code in ("304", "409", "412"):
                answer["headers"] = {"ETag": headers["ETag"]}
            elif code in ("423", "503"):
                answer["headers"] = {"Retry-After": headers["Retry-After"]}
                if code == "423" and self._occupy_action() == "lease":
                    answer["headers"]["Preference-Applied"] = {"schema": {"type": "string"}}
            responses.setdefault(code, answer)
        return operation

    def _occupy_conflict_schema(self, ref: dict[str, Any]) -> dict[str, Any] | None:
        """Return the body of a conditional write's 409 and 412: the error, with the
        object as it is now under ``current`` in the view's own serializer; ``None``
        for operations that answer no such body."""
        if not isinstance(self.view, ConditionalMixin) or self._occupy_action() not in _WRITES:
            return None
        serializer: Any = self.view.get_serializer_class()
        current = self.resolve_serializer(serializer, "response").ref
        return {
            "allOf": [
                ref,
                {
                    "type": "object",
                    "properties": {
                        CURRENT: {
                            **current,
                            "description": "The object as it is now (what GET answers).",
                        }
                    },
                },
            ]
        }


class OccupyAutoSchema(OccupyAutoSchemaMixin, AutoSchema):
    """drf-spectacular's ``AutoSchema`` with occupy's answers, for ``DEFAULT_SCHEMA_CLASS``
    or a view's ``schema``."""


# drf-spectacular's __init_subclass__ (which registers the extension) has no annotations.
class OccupyViewExtension(OpenApiViewExtension):  # type: ignore[no-untyped-call]
    """Give every view using occupy's mixins a schema with occupy's answers."""

    target_class = OccupyErrorsMixin
    match_subclasses = True
    priority = -1  # a user's own view extension wins

    def view_replacement(self) -> type:
        """Return the view with its schema class composed with the occupy mixin.

        Actions decorated with ``extend_schema`` carry a schema class of their own
        (built on ``DEFAULT_SCHEMA_CLASS``): each gets a stand-in whose schema class is
        composed too, so the user's answers and occupy's both appear.
        """
        attrs: dict[str, Any] = {"schema": _composed(type(self.target.schema))()}
        for name in dir(self.target):
            if name.startswith("_") or name == "schema":
                continue
            method = getattr(self.target, name, None)
            options = getattr(method, "kwargs", None)
            if callable(method) and isinstance(options, dict) and "schema" in options:
                attrs[name] = _with_schema(method, _composed(get_class(options["schema"])))
        return type(self.target.__name__, (self.target,), attrs)


def _composed(schema_class: type) -> type:
    """Return ``schema_class`` with :class:`OccupyAutoSchemaMixin` in front."""
    if issubclass(schema_class, OccupyAutoSchemaMixin):
        return schema_class
    return type(f"Occupy{schema_class.__name__}", (OccupyAutoSchemaMixin, schema_class), {})


def _with_schema(method: Any, schema_class: type) -> Any:
    """Return a stand-in for a view method whose ``extend_schema`` schema is
    ``schema_class`` (the original and its options are left untouched)."""

    @functools.wraps(method)
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    # Where drf-spectacular's extend_schema keeps its options: a function attribute.
    stand_in.kwargs = {**method.kwargs, "schema": schema_class}  # type: ignore[attr-defined]
    return stand_in
