"""``EditLeaseMixin``: the edit-lease endpoints under ``…/{pk}/lease/`` (see
:mod:`occupy.rest_framework.mixins`).

A lease is its user's: the token is a bearer credential only together with the session
(or other authentication) of the user who took it. Every "may I take over?" is decided
on the holder the store then replaces (a conditional takeover), never on an earlier read.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from datetime import datetime, timezone
from typing import Any, ClassVar

from django.core.checks import CheckMessage
from django.utils.translation import gettext as _
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import DjangoModelPermissions, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

import occupy
from occupy import http, preconditions
from occupy.checks import Rule
from occupy.conf import occupy_settings
from occupy.exceptions import LeaseLost, Occupied, TakeoverRefused
from occupy.history import log_entry, took_over_message
from occupy.http import requester_pk
from occupy.leases import Holder, Lease
from occupy.owners import parse_owner, same_user
from occupy.rest_framework.exceptions import from_problem
from occupy.rest_framework.lease_ttls import LEASE_DURATIONS, lease_ttl_errors, lease_ttls
from occupy.rest_framework.requests import lease_request_body, seconds
from occupy.rest_framework.serializers import (
    LeaseReleaseSerializer,
    LeaseRequestSerializer,
    LeaseSerializer,
)
from occupy.rest_framework.writes import OccupiedWritesMixin, _checked_token

__all__ = ["EditLeaseMixin"]

#: The edit-lease actions of :class:`EditLeaseMixin` (one per method and route).
LEASE_ACTIONS = frozenset(
    {"lease", "lease_holder", "renew_lease", "end_lease", "release_lease", "takeover_lease"}
)
#: How often a takeover reads the holder again when it changed under it.
TAKEOVER_TRIES = 5
#: The lease actions that need the lease's token in the header.
_TOKEN_ACTIONS = frozenset({"renew_lease", "end_lease"})
#: The form field ``…/lease/release/`` takes the token in (:class:`LeaseReleaseSerializer`).
TOKEN_FIELD = "token"


class EditLeaseMixin(OccupiedWritesMixin):
    """Edit-lease endpoints under ``…/{pk}/lease/`` on a viewset.

    - ``POST`` takes the lease (201 with its token; the holder presenting its token
      again gets 200 and the same lease, extended, with no extra level);
    - ``POST`` with ``Prefer: wait=N`` (RFC 7240) waits up to ``N`` seconds (at most
      ``LEASE_WAIT_MAX``) in the key's first-come-first-served queue when someone else
      holds it: 201 when granted, 423 only once the wait is spent; the answer says
      ``Preference-Applied: wait=<seconds waited at most>``;
    - ``PATCH`` renews it and ``DELETE`` releases it (both need the token in
      ``Occupy-Lease``); a renew without ``ttl`` keeps the lease's own ttl, and a renew
      never shortens a lease: its answer's ``ttl`` is what the lease has left;
    - ``GET`` tells who holds it (never the token), to anyone who may view the object;
    - ``POST …/lease/release/`` releases from ``navigator.sendBeacon`` (form body
      ``token`` plus the CSRF token: nothing is CSRF exempt);
    - ``POST …/lease/takeover/`` takes it over: from another user with
      ``occupy.force_release_occupation`` or ``<app>.takeover_<model>``, from oneself
      without. The permission is decided on the holder read, and the store replaces
      that holder only (``takeover(if_fence=…)``); if it changed, it is read and
      decided again.

    A lease is bound to the user who took it: another user presenting its token gets
    409 ``lease_lost`` on renew, release, beacon, takeover and writes, and the lease
    is left as it is. Leasing needs the change permission on the object; the view's
    permission classes judge the lease endpoints' writes as changes (so that
    ``DjangoModelPermissions`` does not ask for the add or delete permission).
    """

    #: Default and longest lease, in seconds (defaults: the ``REST_FRAMEWORK`` settings).
    lease_ttl: float | None = None
    lease_ttl_max: float | None = None
    #: The longest ``Prefer: wait`` honoured, in whole seconds (default: the setting).
    lease_wait_max: int | None = None
    #: The ``Preference-Applied`` value of the answer being made, if any.
    occupy_preference_applied: str | None = None

    #: The durations a view reads: the writes' and the leases' (``occupy.E304``).
    occupy_durations: ClassVar[dict[str, Rule]] = {
        **OccupiedWritesMixin.occupy_durations,
        **LEASE_DURATIONS,
    }

    @classmethod
    def occupy_checks(cls) -> list[CheckMessage]:
        """Add ``occupy.E304`` for a default lease longer than the longest one."""
        return lease_ttl_errors(cls, super().occupy_checks())

    def get_serializer_class(self) -> Any:
        """Return the lease endpoints' request serializers on their actions (what the
        browsable API and the schema show), else the view's own."""
        act = getattr(self, "action", None)
        if act == "release_lease":
            return LeaseReleaseSerializer
        if act in LEASE_ACTIONS:
            return LeaseRequestSerializer
        return super().get_serializer_class()

    def get_lease_ttl(self, request: Request, default: float | None = None) -> float:
        """Return the ttl the client asks for (body ``ttl``: a number of seconds from 1
        to the longest lease), else ``default``, else the view's default."""
        own, longest = lease_ttls(self)
        value = lease_request_body(request).get("ttl")
        if value is None or value == "":
            return float(default or own)
        ttl = seconds(value)
        if ttl is None or not 1 <= ttl <= longest:
            raise from_problem(http.invalid_ttl(longest, value))
        return ttl

    def get_lease_wait(self, request: Request) -> int | None:
        """Return how long a lease request may wait for the key, in whole seconds: its
        ``Prefer: wait`` (RFC 7240) capped by :attr:`lease_wait_max` (default the
        ``LEASE_WAIT_MAX`` setting); ``None`` when it states no such preference."""
        asked = preconditions.preferred_wait(request.headers.get("Prefer"))
        if asked is None:
            return None
        cap = self.lease_wait_max
        return min(asked, occupy_settings.REST_FRAMEWORK["LEASE_WAIT_MAX"] if cap is None else cap)

    def check_permissions(self, request: Request) -> None:
        """Check the view's permissions; then, on renew and release, that the lease's
        token came (else 428 ``lease_token_required``). Checked here, before the
        object is read, so that the browsable API, which asks this of every form it
        might offer, offers no form that cannot succeed without the header."""
        super().check_permissions(request)
        if getattr(self, "action", None) in _TOKEN_ACTIONS:
            self._required_token(request)

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        """Say which preference of ``Prefer`` the answer applied (RFC 7240)."""
        response = super().finalize_response(request, response, *args, **kwargs)
        if self.occupy_preference_applied is not None:
            response["Preference-Applied"] = self.occupy_preference_applied
        return response

    def get_permissions(self) -> Sequence[Any]:
        """Return the view's permissions; on the lease endpoints, without DRF's model
        permissions (which would ask a ``POST`` for the *add* permission): leasing is
        decided by :meth:`has_lease_permission`, and needs an authenticated user."""
        permissions = super().get_permissions()
        if getattr(self, "action", None) not in LEASE_ACTIONS:
            return permissions
        kept = [p for p in permissions if not isinstance(p, DjangoModelPermissions)]
        return [IsAuthenticated(), *kept]

    def has_lease_permission(self, request: Request, instance: Any) -> bool:
        """Return whether ``request`` may lease ``instance``: its change permission."""
        return _has_model_perm(request, instance, "change")

    def has_holder_permission(self, request: Request, instance: Any) -> bool:
        """Return whether ``request`` may see who holds ``instance``: its view or change
        permission."""
        return _has_model_perm(request, instance, "view") or self.has_lease_permission(
            request, instance
        )

    def has_takeover_permission(self, request: Request, instance: Any) -> bool:
        """Return whether ``request`` may take another user's lease over."""
        opts = instance._meta
        return bool(
            request.user.has_perm("occupy.force_release_occupation")
            or request.user.has_perm(f"{opts.app_label}.takeover_{opts.model_name}")
        )

    def may_take_over(self, request: Request, instance: Any, holder: Holder) -> bool:
        """Return whether ``request`` may replace ``holder``: its own lease, or with the
        takeover permission."""
        return same_user(holder.owner, requester_pk(request)) or self.has_takeover_permission(
            request, instance
        )

    def _leased_object(self, request: Request) -> Any:
        instance = self.get_object()
        if not self.has_lease_permission(request, instance):
            raise PermissionDenied(_("Leasing this object needs the permission to change it."))
        return instance

    def _lease_body(self, lease: Lease, *, token: bool) -> dict[str, Any]:
        body = dict(LeaseSerializer(lease).data)
        if token:
            body["token"] = lease.token
        return body

    def _holder_body(self, holder: Holder | None) -> dict[str, Any]:
        return {"holder": http.holder_body(holder, self.get_owner_display)}

    def _required_token(self, request: Request) -> str:
        token = self.get_lease_token(request)
        if token is None:
            raise from_problem(
                http.lease_token_required(header=occupy_settings.REST_FRAMEWORK["LEASE_HEADER"])
            )
        return token

    @action(detail=True, methods=["post"], url_path="lease", url_name="lease")
    def lease(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Take the edit lease (201 with its token), or, presenting your token again,
        keep it (200, the same lease); with ``Prefer: wait=N``, wait for it in the
        key's queue up to ``N`` seconds (capped) before answering 423."""
        instance = self._leased_object(request)
        key = self.get_lease_key(instance)
        ttl = self.get_lease_ttl(request)
        token = self.get_lease_token(request)
        wait = self.get_lease_wait(request)
        if wait is not None:
            self.occupy_preference_applied = f"wait={wait}"
        if token is not None:
            try:
                self.own_lease(key, token)
            except LeaseLost:
                token = None  # it holds nothing any more: take the key afresh
        lease = occupy.acquire(
            key,
            owner=self.get_lease_owner(request, ttl),
            ttl=ttl,
            timeout=wait or 0,
            token=token,
            reentrant=False,
            backend=self.get_occupy_backend(),
        )
        created = lease.token != token
        return Response(
            self._lease_body(lease, token=True),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @lease.mapping.get
    def lease_holder(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Tell who holds the object (never the token); needs the view permission."""
        instance = self.get_object()
        if not self.has_holder_permission(request, instance):
            raise PermissionDenied(
                _("Seeing who edits this object needs the permission to view it.")
            )
        key = self.get_lease_key(instance)
        return Response(self._holder_body(occupy.holder(key, backend=self.get_occupy_backend())))

    @lease.mapping.patch
    def renew_lease(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Renew your lease (token in ``Occupy-Lease``) by ``ttl``, else its own ttl."""
        instance = self._leased_object(request)
        key = self.get_lease_key(instance)
        token = self._required_token(request)
        lease = self.own_lease(key, token)
        ttl = self.get_lease_ttl(request, default=parse_owner(lease.owner).ttl)
        lease = occupy.resume(key, token, ttl=ttl, backend=self.get_occupy_backend())
        body = self._lease_body(lease, token=False)
        # A renew never shortens a lease (the store keeps the later expiry): answer
        # what the lease now has left, not a ttl asked for and not applied.
        left = (lease.expires_at - datetime.now(timezone.utc)).total_seconds()
        body["ttl"] = round(max(ttl, left), 3)
        return Response(body)

    @lease.mapping.delete
    def end_lease(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Release your lease (token in ``Occupy-Lease``)."""
        instance = self._leased_object(request)
        return self._release(self.get_lease_key(instance), self._required_token(request))

    def _release(self, key: str, token: str) -> Response:
        """Release the lease ``token`` holds: 204, also when it is already gone; 409 if
        someone else holds the key now, or the token is another user's (their lease is
        never touched)."""
        try:
            lease = self.own_lease(key, token)
        except LeaseLost:
            if occupy.holder(key, backend=self.get_occupy_backend()) is not None:
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
        token = lease_request_body(request).get(TOKEN_FIELD)
        if not token:
            raise from_problem(http.lease_token_required(field=TOKEN_FIELD))
        return self._release(self.get_lease_key(instance), _checked_token(token))

    @action(detail=True, methods=["post"], url_path="lease/takeover", url_name="lease-takeover")
    def takeover_lease(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Take the lease over from its holder: a higher fence fences the old holder out.
        Needs the takeover permission, unless the holder is the same user. Answers the
        new lease and, as ``replaced``, the holder it replaced."""
        instance = self._leased_object(request)
        key = self.get_lease_key(instance)
        token = self.get_lease_token(request)
        if token is not None:
            with suppress(LeaseLost):  # a token is optional; another user's is refused
                self.own_lease(key, token)
        ttl = self.get_lease_ttl(request)
        owner = self.get_lease_owner(request, ttl)
        lease, replaced = self._take_over(request, instance, key, owner, ttl)
        if replaced is not None:
            _log_takeover(request, instance, replaced, self.get_owner_display(replaced.owner))
        body = self._lease_body(lease, token=True)
        body["replaced"] = http.holder_body(replaced, self.get_owner_display)
        return Response(body, status=status.HTTP_201_CREATED)

    def _take_over(
        self, request: Request, instance: Any, key: str, owner: str, ttl: float
    ) -> tuple[Lease, Holder | None]:
        """Replace the holder the permission was decided on, and only it: read, decide,
        take over ``if_fence`` of what was read; read and decide again if the store
        says the holder changed meanwhile."""
        refused: Occupied | None = None
        for _attempt in range(TAKEOVER_TRIES):
            holder = occupy.holder(key, backend=self.get_occupy_backend())
            if holder is None:
                try:  # free: take it only if still free
                    return occupy.acquire(
                        key,
                        owner=owner,
                        ttl=ttl,
                        timeout=0,
                        reentrant=False,
                        backend=self.get_occupy_backend(),
                    ), None
                except Occupied as e:
                    refused = e
                    continue
            if parse_owner(holder.owner).write:
                try:  # a write in flight is nobody's lease to take: wait for it
                    return occupy.acquire(
                        key,
                        owner=owner,
                        ttl=ttl,
                        timeout=self.get_write_wait(),
                        reentrant=False,
                        backend=self.get_occupy_backend(),
                    ), None
                except Occupied as e:
                    refused = e
                    continue
            if not self.may_take_over(request, instance, holder):
                raise PermissionDenied(
                    _("Taking over another user's edit lease needs the takeover permission.")
                )
            try:
                return occupy.takeover(
                    key,
                    owner=owner,
                    ttl=ttl,
                    reentrant=False,
                    if_fence=holder.fence,
                    backend=self.get_occupy_backend(),
                ), holder
            except TakeoverRefused as e:
                refused = e
        assert refused is not None
        raise refused  # the holder kept changing: 423 with whoever holds it now


def _has_model_perm(request: Request, instance: Any, verb: str) -> bool:
    opts = instance._meta
    perm = f"{opts.app_label}.{verb}_{opts.model_name}"
    return bool(request.user.has_perm(perm) or request.user.has_perm(perm, instance))


def _log_takeover(request: Request, instance: Any, holder: Holder, display: str) -> None:
    """Write an admin log entry for a takeover, naming the holder it replaced, where the
    admin app is installed."""
    from django.apps import apps

    if not apps.is_installed("django.contrib.admin") or not request.user.is_authenticated:
        return
    from django.contrib.admin.models import CHANGE

    log_entry(request.user.pk, instance, CHANGE, took_over_message(display, holder.fence))
