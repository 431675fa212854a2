"""``ConditionalMixin``: ETags and conditional writes, the client's version checked in the
write's own statement (see :mod:`occupy.rest_framework.mixins`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured, ObjectDoesNotExist
from django.http import Http404
from django.utils.http import parse_etags
from django.utils.translation import gettext as _
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response

from occupy import http, preconditions, telemetry
from occupy.conf import occupy_settings
from occupy.exceptions import ConflictError, VersionConflict
from occupy.http import Problem
from occupy.rest_framework.errors import OccupyErrorsMixin
from occupy.rest_framework.exceptions import from_problem
from occupy.versions import get_version, get_version_name

__all__ = ["ConditionalMixin"]

if TYPE_CHECKING:
    from rest_framework.viewsets import ModelViewSet

    _ModelViewSet = ModelViewSet[Any]
else:
    _ModelViewSet = object

#: The largest version a client may send (``VersionedMixin``'s column is a
#: ``PositiveIntegerField``).
MAX_VERSION = 2**31 - 1
#: How often a write with ``If-Match: *`` is tried on the row as it is now, when another
#: write lands between its read and its own (only possible without the key held:
#: ``ConditionalMixin`` alone), as Kubernetes retries an unconditional patch.
ANY_VERSION_TRIES = 5
#: The body member of a 412 or 409 ``version_conflict`` that carries the object as it
#: is now (what ``GET`` would answer, with the ``ETag`` header beside it).
CURRENT = "current"
_WRITES = ("update", "partial_update", "destroy")


def _require_versioned(view: Any, instance: Any) -> None:
    from occupy.models import VersionedMixin

    if not isinstance(instance, VersionedMixin):
        raise ImproperlyConfigured(
            f"{type(view).__name__} uses ConditionalMixin, which needs a model with "
            f"occupy.models.VersionedMixin; {type(instance).__name__} has none."
        )


def _malformed(detail: str) -> Exception:
    return from_problem(Problem(400, "malformed_precondition", detail))


class ConditionalMixin(OccupyErrorsMixin, _ModelViewSet):
    """ETags and conditional writes on a ``GenericAPIView`` of a ``VersionedMixin`` model.

    - Retrieve answers with ``ETag: "<version>"``, and ``304`` for a matching
      ``If-None-Match``; writes answer with the new ``ETag``.
    - Update, partial update and destroy take the client's version from ``If-Match``
      and the body's ``version`` and give it to the guarded ``UPDATE`` or delete
      (in ``perform_update`` / ``perform_destroy``): a stale ``If-Match`` is 412, a
      stale body version 409, both whether the pre-check or the write itself finds it.
      ``If-Match: *`` means "any current version": the write is applied to the row
      as it is when the write runs (under the object's key with
      ``OccupiedWritesMixin``), never refused for a change made since the client's
      read; a body ``version`` sent with it is still a precondition.
    - ``If-None-Match`` on a write is evaluated after ``If-Match`` (RFC 9110, 13.2.2):
      ``*``, or a tag of the current version, is 412, since the object exists.
    - Entity tags compare by their characters: ``"013"`` is not ``"13"``.
    - A 412, or a 409 ``version_conflict``, carries the object as it is now under
      ``current`` (the view's serializer) and its ``ETag``, so the client may apply
      its change again without another ``GET``.
    - A malformed body version is 400 ``malformed_precondition`` whether or not the
      serializer has a version field (checked before the serializer reads the body).
    - ``If-Match`` and a body ``version`` that name different versions are refused
      with 400 ``malformed_precondition``: the request contradicts itself, and neither
      half may be dropped silently.
    - Methods in ``precondition_required`` (default ``PUT``, ``PATCH``, ``DELETE``)
      without either are refused with 428; a malformed ``If-Match`` with 400.

    Hooks: :meth:`get_etag`, :meth:`get_client_version`.
    """

    #: Methods that must carry a precondition (``()``: none must).
    precondition_required: tuple[str, ...] | None = None
    #: The body member that may carry the client's version (``None``: the name of the
    #: model's version field, ``version`` unless it names its own).
    body_version_field: str | None = None
    #: Set while a write runs with ``If-Match: *`` and no version: it applies to the
    #: row as it is now.
    occupy_any_version = False

    def get_precondition_required(self) -> tuple[str, ...]:
        """Return the methods that must be conditional (the view's, else the setting)."""
        if self.precondition_required is not None:
            return tuple(self.precondition_required)
        return tuple(occupy_settings.REST_FRAMEWORK["PRECONDITION_REQUIRED"])

    def get_etag(self, instance: Any) -> str | None:
        """Return the ETag of ``instance``: its version, strong and quoted."""
        return preconditions.etag_for(get_version(instance))

    def get_body_version_field(self) -> str:
        """Return the body member that may carry the client's version:
        :attr:`body_version_field`, else the name of the queryset model's version field."""
        if self.body_version_field is not None:
            return self.body_version_field
        return get_version_name(self.get_queryset().model)

    def get_body_version(self, request: Request) -> int | None:
        """Return the version the body carries, or ``None``; 400 for one that is no
        whole number from 1 to :data:`MAX_VERSION` (``true`` is no version)."""
        name = self.get_body_version_field()
        value = request.data.get(name) if hasattr(request.data, "get") else None
        if value is None or value == "":
            return None
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VERSION:
            raise _malformed(
                _("%(field)s must be a whole number from 1 to %(max)d, not %(value)s.")
                % {"field": repr(name), "max": MAX_VERSION, "value": repr(str(value)[:40])}
            )
        return value

    def get_client_version(self, request: Request, instance: Any) -> int | None:
        """Return the version the client says it read: from ``If-Match`` and the body's
        version (``None``: none, or ``*`` alone, which sets
        :attr:`occupy_any_version`); raise the contract's error when they are
        malformed, disagree, are stale, or are missing where one is required, or when
        ``If-None-Match`` matches the object (it exists: 412)."""
        header = request.headers.get("If-Match")
        body = self.get_body_version(request)
        version: int | None = None
        if header is not None:
            tags = preconditions.parse_if_match(header)
            if tags == [preconditions.ANY]:
                self.occupy_any_version = body is None
            else:
                versions = {preconditions.tag_version(tag) for tag in tags}
                if body is not None and body not in versions:
                    raise _malformed(
                        _(
                            "If-Match (%(header)s) and the body's %(field)s (%(version)s) name "
                            "different versions; send one of them, or the same in both."
                        )
                        % {
                            "header": header[:80],
                            "field": repr(self.get_body_version_field()),
                            "version": body,
                        }
                    )
                self.occupy_if_match = True
                current = get_version(instance)
                if current not in versions:  # fail fast; the write checks again
                    raise ConflictError("stale If-Match", model=type(instance), pk=instance.pk)
                version = int(current)
        if version is None and body is not None:
            if body != get_version(instance):
                raise ConflictError("stale body version", model=type(instance), pk=instance.pk)
            version = body
        self.check_if_none_match(request, instance)
        if (
            header is None
            and version is None
            and request.method in self.get_precondition_required()
        ):
            raise from_problem(
                http.precondition_required(
                    request.method, ["If-Match", self.get_body_version_field()]
                )
            )
        return version

    def check_if_none_match(self, request: Request, instance: Any) -> None:
        """Refuse a write whose ``If-None-Match`` matches ``instance`` (``*``, or its
        ETag by weak comparison) with 412: the condition is false for an object that
        exists (RFC 9110, 13.1.2); 400 for text that is no list of entity tags."""
        header = request.headers.get("If-None-Match")
        if header is None:
            return
        tags = preconditions.parse_if_match(header, name="If-None-Match")
        etag = self.get_etag(instance)
        if tags == [preconditions.ANY] or (etag is not None and _none_match(header, etag)):
            self.occupy_if_match = True
            raise ConflictError(
                "If-None-Match matches the object", model=type(instance), pk=instance.pk
            )

    def check_client_version(self, instance: Any) -> int | None:
        """Return the client's version for a write of ``instance`` (``None``: none
        given), raising the contract's error when it is stale or malformed."""
        _require_versioned(self, instance)
        return self.get_client_version(self.request, instance)

    def expect_client_version(self, instance: Any) -> None:
        """Make the client's version the precondition of the write of ``instance``
        (with ``If-Match: *``, the version the row has now)."""
        version = self.check_client_version(instance)
        if version is not None:
            instance.expect_version(version)
        elif self.occupy_any_version:
            expect_current_version(instance)
        self.occupy_instance = instance

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Refuse a malformed body version with 400 ``malformed_precondition`` before
        the serializer reads the body, so that it has one answer whichever serializer
        the view uses; then update as DRF does."""
        self.get_body_version(request)
        return super().update(request, *args, **kwargs)

    def perform_update(self, serializer: Any) -> None:
        """Save with the client's version as the guarded ``UPDATE``'s precondition;
        with ``If-Match: *``, on the row as it is now (read again if another write
        landed first, a few times)."""
        self.expect_client_version(serializer.instance)
        for attempt in range(ANY_VERSION_TRIES):
            try:
                super().perform_update(serializer)
                return
            except VersionConflict:  # a FencedOut lease stays out however often it tries
                if not self.occupy_any_version or attempt == ANY_VERSION_TRIES - 1:
                    raise
                expect_current_version(serializer.instance)

    def perform_destroy(self, instance: Any) -> None:
        """Delete with the client's version as the guarded delete's precondition."""
        self.expect_client_version(instance)
        super().perform_destroy(instance)

    def complete_problem(self, problem: Problem) -> None:
        """Give a write's 412 or 409 ``version_conflict`` the object as it is now
        (``current``, as ``GET`` answers it) and its ``ETag``, read once so they agree;
        nothing when the object cannot be read any more."""
        super().complete_problem(problem)
        if problem.code not in ("precondition_failed", "version_conflict") or (
            getattr(self, "action", None) not in _WRITES
        ):
            return
        try:
            instance = self.get_object()
        except (Http404, ObjectDoesNotExist, APIException):
            return
        problem.extra["current_version"] = get_version(instance)
        problem.extra[CURRENT] = self.get_serializer(instance).data
        etag = self.get_etag(instance)
        if etag is not None:
            problem.headers["ETag"] = etag

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Answer with the object and its ETag, or 304 for a matching If-None-Match."""
        instance = self.get_object()
        etag = self.get_etag(instance)
        if etag is not None and _none_match(request.headers.get("If-None-Match"), etag):
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        response = super().retrieve(request, *args, **kwargs)
        if etag is not None:
            response["ETag"] = etag
        return response

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """Give a successful write's answer the object's new ETag; count an answer with
        an occupy status (telemetry)."""
        response = super().finalize_response(request, response, *args, **kwargs)
        if response.status_code in telemetry.HTTP_STATUSES:
            data = getattr(response, "data", None)
            telemetry.http_response(
                response.status_code, data.get("code") if isinstance(data, dict) else None
            )
        instance = getattr(self, "occupy_instance", None)
        if (
            instance is not None
            and request.method in ("PUT", "PATCH")
            and 200 <= response.status_code < 300
            and "ETag" not in response
        ):
            etag = self.get_etag(instance)
            if etag is not None:
                response["ETag"] = etag
        return response


def expect_current_version(instance: Any) -> None:
    """Read ``instance`` again and make the version it has now the precondition of its
    next write (``If-Match: *``: any current version)."""
    instance.refresh_from_db()
    instance.expect_version(get_version(instance))


def _none_match(header: str | None, etag: str) -> bool:
    """Return whether ``If-None-Match`` matches ``etag`` (weak comparison, RFC 9110)."""
    if not header:
        return False
    tags = parse_etags(header)
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)
