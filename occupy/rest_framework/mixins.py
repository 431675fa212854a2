"""View mixins that give a DRF API occupy's HTTP contract (:mod:`occupy.http`).

    class BookViewSet(OccupyViewMixin, viewsets.ModelViewSet):
        queryset = Book.objects.all()          # a VersionedMixin + OccupiableMixin model
        serializer_class = BookSerializer      # with OccupyModelSerializerMixin

The rule every mixin follows: the decisive comparison happens in the same statement or
critical section as the write. ``ConditionalMixin`` puts the client's version into
``VersionedMixin``'s guarded ``UPDATE`` (or guarded delete); ``OccupiedWritesMixin``
holds the object's key for the length of the write, or writes under the client's edit
lease with its fence. A pre-check only answers early.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils.http import parse_etags
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.permissions import DjangoModelPermissions, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

import occupy
from occupy import http
from occupy.conf import occupy_settings
from occupy.exceptions import (
    ConflictError,
    FencedOut,
    LeaseLost,
    OccupyError,
    StoreUnavailable,
)
from occupy.history import log_entry
from occupy.http import MalformedPrecondition, Problem
from occupy.leases import Holder, Lease
from occupy.rest_framework.exceptions import OccupyAPIException, from_problem
from occupy.rest_framework.serializers import LeaseSerializer
from occupy.validation import MIN_TTL, check_token

__all__ = [
    "ConditionalMixin",
    "EditLeaseMixin",
    "OccupiedWritesMixin",
    "OccupyErrorsMixin",
    "OccupyViewMixin",
]

if TYPE_CHECKING:
    from rest_framework.views import APIView
    from rest_framework.viewsets import ModelViewSet

    _APIView = APIView
    # What the write mixins extend: a generic view with the model mixins' actions.
    _ModelViewSet = ModelViewSet[Any]
else:
    _APIView = _ModelViewSet = object

_USER_OWNER = re.compile(r"^user:([^:]+)")
#: The edit-lease actions of :class:`EditLeaseMixin`.
_LEASE_ACTIONS = frozenset({"lease", "release_lease", "takeover_lease"})


class OccupyErrorsMixin(_APIView):
    """Answer occupy's exceptions with the contract's status, body and headers.

    Occupy errors become :mod:`occupy.rest_framework.exceptions` before DRF's exception
    handler sees them (so a custom ``EXCEPTION_HANDLER`` still gets ``APIException`` s);
    afterwards the problem's members (``code``, ``holder``, ``current_version``…) and
    headers (``ETag``, ``Retry-After``) are added to a DRF-shaped body.
    """

    #: Set while a write runs with a precondition from ``If-Match`` (a lost race is 412).
    occupy_if_match = False

    def get_owner_display(self, owner: str) -> str:
        """Return what clients are told of a holder: the user's full name or username
        for ``"user:<pk>…"`` owners, else ``"someone else"`` (an owner string may name a
        host and process, which is nobody's business)."""
        match = _USER_OWNER.match(owner)
        if match is not None:
            from django.contrib.auth import get_user_model

            user_model = get_user_model()
            try:
                user = user_model._default_manager.get(pk=match[1])
            except (user_model.DoesNotExist, ValueError, TypeError):
                return "another user"
            return user.get_full_name() or user.get_username()
        return "someone else"

    def occupy_problem(self, exc: OccupyError) -> Problem:
        """Return the :class:`~occupy.http.Problem` answering ``exc``."""
        current = None
        if (isinstance(exc, ConflictError) and exc.model is not None and exc.pk is not None
                and any(f.name == "version" for f in exc.model._meta.concrete_fields)):
            current = (exc.model._base_manager.filter(pk=exc.pk)
                       .values_list("version", flat=True).first())
        return http.problem_for(exc, display=self.get_owner_display, current_version=current,
                                from_if_match=self.occupy_if_match)

    def handle_exception(self, exc: Exception) -> Response:
        """Map occupy's exceptions to the contract, then let DRF answer."""
        if isinstance(exc, MalformedPrecondition | ConflictError | LeaseLost | occupy.Occupied
                      | StoreUnavailable):
            exc = from_problem(self.occupy_problem(exc))
        response = super().handle_exception(exc)
        problem = getattr(exc, "problem", None)
        if isinstance(exc, OccupyAPIException) and problem is not None:
            data = response.data
            if isinstance(data, dict) and "detail" in data and "type" not in data:
                response.data = {**data, "code": problem.code, **problem.extra}
            for name, value in problem.headers.items():
                if name not in response:
                    response[name] = value
        return response


def _require_versioned(view: Any, instance: Any) -> None:
    from occupy.models import VersionedMixin

    if not isinstance(instance, VersionedMixin):
        raise ImproperlyConfigured(
            f"{type(view).__name__} uses ConditionalMixin, which needs a model with "
            f"occupy.models.VersionedMixin; {type(instance).__name__} has none."
        )


class ConditionalMixin(OccupyErrorsMixin, _ModelViewSet):
    """ETags and conditional writes on a ``GenericAPIView`` of a ``VersionedMixin`` model.

    - Retrieve answers with ``ETag: "<version>"``, and ``304`` for a matching
      ``If-None-Match``; writes answer with the new ``ETag``.
    - Update, partial update and destroy take the client's version from ``If-Match``
      (else from the body's ``version``) and give it to the guarded ``UPDATE`` or
      delete: a stale ``If-Match`` is 412, a stale body version 409, both whether the
      pre-check or the write itself finds it. ``If-Match: *`` writes without a version
      (the model's field-level policy then applies).
    - Methods in ``precondition_required`` (default ``PUT``, ``PATCH``, ``DELETE``)
      without either are refused with 428; a malformed ``If-Match`` with 400.

    Hooks: :meth:`get_etag`, :meth:`get_client_version`.
    """

    #: Methods that must carry a precondition (``()``: none must).
    precondition_required: tuple[str, ...] | None = None
    #: The body member that may carry the client's version.
    body_version_field = "version"

    def get_precondition_required(self) -> tuple[str, ...]:
        """Return the methods that must be conditional (the view's, else the setting)."""
        if self.precondition_required is not None:
            return tuple(self.precondition_required)
        return tuple(occupy_settings.REST_FRAMEWORK["PRECONDITION_REQUIRED"])

    def get_etag(self, instance: Any) -> str | None:
        """Return the ETag of ``instance``: its version, strong and quoted."""
        return http.etag_for(getattr(instance, "version", None))

    def get_client_version(self, request: Request, instance: Any) -> int | None:
        """Return the version the client says it read: from ``If-Match`` (``None`` for
        ``*``), else from the body's version; raise the contract's error when the
        header is malformed, stale, or missing where it is required."""
        header = request.headers.get("If-Match")
        if header is not None:
            tags = http.parse_if_match(header)
            if tags == [http.ANY]:
                return None
            self.occupy_if_match = True
            versions = {http.tag_version(tag) for tag in tags}
            if instance.version not in versions:  # fail fast; the write checks again
                raise ConflictError("stale If-Match", model=type(instance), pk=instance.pk)
            return int(instance.version)
        value = request.data.get(self.body_version_field) if hasattr(request.data, "get") \
            else None
        if value is not None and value != "":
            try:
                version = int(value)
            except (TypeError, ValueError):
                raise from_problem(Problem(
                    400, "malformed_precondition",
                    f"{self.body_version_field!r} must be a whole number, not {value!r}.",
                )) from None
            if version != instance.version:
                raise ConflictError("stale body version", model=type(instance), pk=instance.pk)
            return version
        if request.method in self.get_precondition_required():
            raise from_problem(http.precondition_required(
                request.method, ["If-Match", self.body_version_field]))
        return None

    def get_object(self) -> Any:
        """Return the object, with the client's version set as the write's precondition
        on writes (after authentication, the lookup and permissions: RFC 9110 order)."""
        instance = super().get_object()
        request = self.request
        action = getattr(self, "action", None)
        writing = (action in ("update", "partial_update", "destroy") if action is not None
                   else request.method in ("PUT", "PATCH", "DELETE"))
        if writing:
            _require_versioned(self, instance)
            version = self.get_client_version(request, instance)
            if version is not None:
                instance.expect_version(version)
            self.occupy_instance = instance
        return instance

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

    def finalize_response(self, request: Request, response: Response, *args: Any,
                          **kwargs: Any) -> Response:
        """Give a successful write's answer the object's new ETag."""
        response = super().finalize_response(request, response, *args, **kwargs)
        instance = getattr(self, "occupy_instance", None)
        if (instance is not None and request.method in ("PUT", "PATCH")
                and 200 <= response.status_code < 300 and "ETag" not in response):
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


class OccupiedWritesMixin(OccupyErrorsMixin, _ModelViewSet):
    """Writes never happen inside someone else's edit lease.

    A write that carries ``Occupy-Lease: <token>`` runs under that lease: the store
    checks the token, and the save is fenced by it (``FencedMixin`` models) in a
    transaction that first confirms the lease is still held. A write without a token
    holds the object's key itself for the length of the write (``timeout=0``), so "is
    someone editing it?" and the write are one critical section; held by someone else:
    423 with ``Retry-After``.
    """

    #: The occupy backend alias the leases live in.
    occupy_backend = "default"
    #: How long a write without a lease may hold the key, in seconds.
    write_ttl = 30

    def get_lease_key(self, instance: Any) -> str:
        """Return the lock key of ``instance`` (its ``occupy_key``, else ``app.model:pk``)."""
        key = getattr(instance, "occupy_key", None)
        if key is None:
            from occupy.models import object_key

            key = object_key(type(instance), instance.pk)
        return key

    def get_lease_owner(self, request: Request) -> str:
        """Return the owner of leases taken for ``request``: ``user:<pk>``, plus
        ``:client:<id>`` when the client names itself in ``Occupy-Client``."""
        user = getattr(request, "user", None)
        pk = getattr(user, "pk", None)
        owner = f"user:{pk}" if pk is not None else "anonymous"
        client = request.headers.get(occupy_settings.REST_FRAMEWORK["CLIENT_HEADER"])
        if client:
            owner = f"{owner}:client:{client[:64]}"
        return owner

    def get_lease_token(self, request: Request) -> str | None:
        """Return the lease token the request presents (header), or ``None``; raise
        400 for a header that cannot be a token."""
        token = request.headers.get(occupy_settings.REST_FRAMEWORK["LEASE_HEADER"])
        if not token:
            return None
        try:
            return check_token(token)
        except (TypeError, ValueError) as e:
            raise from_problem(Problem(400, "malformed_precondition", str(e))) from e

    @contextmanager
    def occupy_write(self, instance: Any) -> Iterator[Lease]:
        """Hold the object's key (or the presented lease) around a write."""
        key = self.get_lease_key(instance)
        token = self.get_lease_token(self.request)
        if token is None:
            with occupy.lock(key, owner=self.get_lease_owner(self.request),
                             ttl=self.write_ttl, timeout=0, using=self.occupy_backend) as lease:
                yield lease
            return
        try:
            lease = occupy.resume(key, token, ttl=self.write_ttl, using=self.occupy_backend)
        except LeaseLost as e:  # taken over or expired: this write is fenced out
            raise FencedOut(f"The edit lease on {key!r} is no longer held; nothing was "
                            "written.", model=type(instance), pk=instance.pk, key=key) from e
        use_lease = getattr(instance, "use_lease", None)
        if use_lease is not None:
            use_lease(lease)
        with transaction.atomic(using=instance._state.db):
            yield lease
            lease.ensure_held()

    def perform_create(self, serializer: Any) -> None:
        """Create as usual (a new object has no lease yet)."""
        super().perform_create(serializer)

    def perform_update(self, serializer: Any) -> None:
        """Save under the object's key or the presented lease."""
        with self.occupy_write(serializer.instance):
            super().perform_update(serializer)

    def perform_destroy(self, instance: Any) -> None:
        """Delete under the object's key or the presented lease."""
        with self.occupy_write(instance):
            super().perform_destroy(instance)


class EditLeaseMixin(OccupiedWritesMixin):
    """Edit-lease endpoints under ``…/{pk}/lease/`` on a viewset.

    ``POST`` takes the lease (201 with its token; the holder presenting its token again
    gets 200 and the same lease, extended, with no extra level), ``PATCH`` renews it and
    ``DELETE`` releases it (both need the token in ``Occupy-Lease``), ``GET`` tells who
    holds it (never the token). ``POST …/lease/release/`` releases from
    ``navigator.sendBeacon`` (form body ``token`` plus the CSRF token: nothing is CSRF
    exempt), ``POST …/lease/takeover/`` takes it over (needs
    ``occupy.force_release_occupation`` or ``<app>.takeover_<model>``, or being the same
    user as the holder). Leasing needs the change permission on the object, and the
    view's permission classes judge the lease endpoints' writes as changes (so that
    ``DjangoModelPermissions`` does not ask for the add or delete permission).
    """

    #: Default and longest lease, in seconds (defaults: the ``REST_FRAMEWORK`` settings).
    lease_ttl: float | None = None
    lease_ttl_max: float | None = None

    def get_lease_ttl(self, request: Request) -> float:
        """Return the ttl the client asks for (body ``ttl``), within bounds."""
        conf = occupy_settings.REST_FRAMEWORK
        default = self.lease_ttl or conf["LEASE_TTL"]
        longest = self.lease_ttl_max or conf["LEASE_TTL_MAX"]
        value = request.data.get("ttl") if hasattr(request.data, "get") else None
        if value in (None, ""):
            return float(default)
        try:
            ttl = float(value)
        except (TypeError, ValueError):
            ttl = -1.0
        if not MIN_TTL <= ttl <= longest:  # below a millisecond no store keeps it
            raise from_problem(Problem(400, "invalid_ttl",
                                       f"ttl must be a number of seconds from 1 to {longest:g}."))
        return ttl

    def get_permissions(self) -> Sequence[Any]:
        """Return the view's permissions; on the lease endpoints, without DRF's model
        permissions (which would ask a ``POST`` for the *add* permission): leasing is
        decided by :meth:`has_lease_permission`, and needs an authenticated user."""
        permissions = super().get_permissions()
        if getattr(self, "action", None) not in _LEASE_ACTIONS:
            return permissions
        kept = [p for p in permissions if not isinstance(p, DjangoModelPermissions)]
        return [IsAuthenticated(), *kept]

    def has_lease_permission(self, request: Request, instance: Any) -> bool:
        """Return whether ``request`` may lease ``instance``: its change permission."""
        opts = instance._meta
        perm = f"{opts.app_label}.change_{opts.model_name}"
        return bool(request.user.has_perm(perm) or request.user.has_perm(perm, instance))

    def has_takeover_permission(self, request: Request, instance: Any) -> bool:
        """Return whether ``request`` may take another owner's lease over."""
        opts = instance._meta
        return bool(request.user.has_perm("occupy.force_release_occupation")
                    or request.user.has_perm(f"{opts.app_label}.takeover_{opts.model_name}"))

    def _leased_object(self, request: Request) -> Any:
        instance = self.get_object()
        if not self.has_lease_permission(request, instance):
            from rest_framework.exceptions import PermissionDenied

            raise PermissionDenied("Leasing this object needs the permission to change it.")
        return instance

    def _lease_body(self, lease: Lease, *, token: bool) -> dict[str, Any]:
        body = LeaseSerializer(lease).data
        if token:
            body["token"] = lease.token
        return body

    def _holder_body(self, holder: Holder | None) -> dict[str, Any]:
        return {"holder": http.holder_body(holder, self.get_owner_display)}

    @action(detail=True, methods=["get", "post", "patch", "delete"], url_path="lease",
            url_name="lease")
    def lease(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Take (POST), renew (PATCH), release (DELETE) or look at (GET) the edit lease."""
        instance = self._leased_object(request)
        key = self.get_lease_key(instance)
        if request.method == "GET":
            return Response(self._holder_body(occupy.holder(key, using=self.occupy_backend)))
        if request.method == "POST":
            token = self.get_lease_token(request)
            lease = occupy.acquire(key, owner=self.get_lease_owner(request),
                                   ttl=self.get_lease_ttl(request), timeout=0, token=token,
                                   reentrant=False, using=self.occupy_backend)
            created = lease.token != token
            return Response(self._lease_body(lease, token=True),
                            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
        token = self.get_lease_token(request)
        if token is None:
            raise from_problem(http.lease_token_required(
                occupy_settings.REST_FRAMEWORK["LEASE_HEADER"]))
        if request.method == "PATCH":
            lease = occupy.resume(key, token, ttl=self.get_lease_ttl(request),
                                  using=self.occupy_backend)
            return Response(self._lease_body(lease, token=False))
        return self._release(key, token)

    def _release(self, key: str, token: str) -> Response:
        """Release the lease ``token`` holds: 204, also when it is already gone; 409 if
        someone else holds the key now (their lease is never touched)."""
        try:
            lease = occupy.resume(key, token, ttl=1, using=self.occupy_backend)
        except LeaseLost:
            if occupy.holder(key, using=self.occupy_backend) is not None:
                raise
            return Response(status=status.HTTP_204_NO_CONTENT)
        with suppress(LeaseLost):  # it expired in between: nothing is held, as asked
            occupy.release(lease)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @action(detail=True, methods=["post"], url_path="lease/release", url_name="lease-release")
    def release_lease(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Release the lease whose token the form body carries (``navigator.sendBeacon``
        cannot set headers); CSRF-protected like any other session request."""
        instance = self._leased_object(request)
        token = request.data.get("token") if hasattr(request.data, "get") else None
        if not token:
            raise from_problem(http.lease_token_required("'token' form field"))
        try:
            token = check_token(token)
        except (TypeError, ValueError) as e:
            raise from_problem(Problem(400, "malformed_precondition", str(e))) from e
        return self._release(self.get_lease_key(instance), token)

    @action(detail=True, methods=["post"], url_path="lease/takeover", url_name="lease-takeover")
    def takeover_lease(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Take the lease over from its holder: a higher fence fences the old holder out.
        Needs the takeover permission, unless the holder is the same user."""
        instance = self._leased_object(request)
        key = self.get_lease_key(instance)
        owner = self.get_lease_owner(request)
        holder = occupy.holder(key, using=self.occupy_backend)
        same_user = holder is not None and _user_part(holder.owner) == _user_part(owner)
        if holder is not None and not same_user and not self.has_takeover_permission(
                request, instance):
            from rest_framework.exceptions import PermissionDenied

            raise PermissionDenied("Taking over another user's edit lease needs the "
                                   "takeover permission.")
        lease = occupy.takeover(key, owner=owner, ttl=self.get_lease_ttl(request),
                                reentrant=False, using=self.occupy_backend)
        if holder is not None and not same_user:
            _log_takeover(request, instance, holder, self.get_owner_display(holder.owner))
        return Response(self._lease_body(lease, token=True), status=status.HTTP_201_CREATED)


def _user_part(owner: str) -> str:
    """Return the ``user:<pk>`` part of an owner (the whole owner if it has none)."""
    match = _USER_OWNER.match(owner)
    return match[0] if match else owner


def _log_takeover(request: Request, instance: Any, holder: Holder, display: str) -> None:
    """Write an admin log entry for a takeover, where the admin app is installed."""
    from django.apps import apps

    if not apps.is_installed("django.contrib.admin") or not request.user.is_authenticated:
        return
    from django.contrib.admin.models import CHANGE

    log_entry(request.user.pk, instance, CHANGE,
              f"Took over the edit lease from {display} (fence {holder.fence}).")


class OccupyViewMixin(EditLeaseMixin, ConditionalMixin):
    """Conditional requests, writes outside other editors' leases, and lease endpoints."""
