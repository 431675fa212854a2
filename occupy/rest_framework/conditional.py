"""``ConditionalMixin``: ETags and conditional writes, the client's version checked in the
write's own statement (see :mod:`occupy.rest_framework.mixins`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.http import parse_etags
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from occupy import http, telemetry
from occupy.conf import occupy_settings
from occupy.exceptions import ConflictError
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
      ``If-Match: *`` writes without a version (the model's field-level policy then
      applies, or the body's version when it sends one).
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

    def get_precondition_required(self) -> tuple[str, ...]:
        """Return the methods that must be conditional (the view's, else the setting)."""
        if self.precondition_required is not None:
            return tuple(self.precondition_required)
        return tuple(occupy_settings.REST_FRAMEWORK["PRECONDITION_REQUIRED"])

    def get_etag(self, instance: Any) -> str | None:
        """Return the ETag of ``instance``: its version, strong and quoted."""
        return http.etag_for(get_version(instance))

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
                f"{name!r} must be a whole number from 1 to {MAX_VERSION}, not {str(value)[:40]!r}."
            )
        return value

    def get_client_version(self, request: Request, instance: Any) -> int | None:
        """Return the version the client says it read: from ``If-Match`` (``None`` for
        ``*``) and the body's version; raise the contract's error when they are
        malformed, disagree, are stale, or are missing where one is required."""
        header = request.headers.get("If-Match")
        body = self.get_body_version(request)
        if header is not None:
            tags = http.parse_if_match(header)
            if tags != [http.ANY]:
                versions = {http.tag_version(tag) for tag in tags}
                if body is not None and body not in versions:
                    raise _malformed(
                        f"If-Match ({header[:80]}) and the body's "
                        f"{self.get_body_version_field()!r} ({body}) name different "
                        "versions; send one of them, or the same in both."
                    )
                self.occupy_if_match = True
                current = get_version(instance)
                if current not in versions:  # fail fast; the write checks again
                    raise ConflictError("stale If-Match", model=type(instance), pk=instance.pk)
                return int(current)
        if body is not None:
            if body != get_version(instance):
                raise ConflictError("stale body version", model=type(instance), pk=instance.pk)
            return body
        if header is None and request.method in self.get_precondition_required():
            raise from_problem(
                http.precondition_required(
                    request.method, ["If-Match", self.get_body_version_field()]
                )
            )
        return None

    def check_client_version(self, instance: Any) -> int | None:
        """Return the client's version for a write of ``instance`` (``None``: none
        given), raising the contract's error when it is stale or malformed."""
        _require_versioned(self, instance)
        return self.get_client_version(self.request, instance)

    def expect_client_version(self, instance: Any) -> None:
        """Make the client's version the precondition of the write of ``instance``."""
        version = self.check_client_version(instance)
        if version is not None:
            instance.expect_version(version)
        self.occupy_instance = instance

    def perform_update(self, serializer: Any) -> None:
        """Save with the client's version as the guarded ``UPDATE``'s precondition."""
        self.expect_client_version(serializer.instance)
        super().perform_update(serializer)

    def perform_destroy(self, instance: Any) -> None:
        """Delete with the client's version as the guarded delete's precondition."""
        self.expect_client_version(instance)
        super().perform_destroy(instance)

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


def _none_match(header: str | None, etag: str) -> bool:
    """Return whether ``If-None-Match`` matches ``etag`` (weak comparison, RFC 9110)."""
    if not header:
        return False
    tags = parse_etags(header)
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)
