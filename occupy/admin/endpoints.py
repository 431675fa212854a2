"""The JSON endpoints ``occupy/admin/edit_lease.js`` calls, under each object's
``<object_id>/occupy/``: ``renew/``, ``release/``, ``status/`` (JSON) and
``takeover/`` (a form post that opens the change form).

All are behind ``admin_site.admin_view`` and CSRF-protected (the beacon posts the
token in its form body). A user who may not change the object gets 404; a token that
is not the posting user's tab's is refused like a lost lease, the lease untouched;
the store being down answers 503 (JSON) or a message on the page (takeover); so does
an admin that cannot lock as configured, its 503 marked ``misconfigured``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import path, reverse
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST

import occupy
from occupy.admin.editing import TAB, EditLeaseBase, TakeoverDenied
from occupy.admin.fields import LEASE_FIELD, TAB_FIELD
from occupy.admin.sentences import unavailable_text
from occupy.exceptions import LeaseLost, Misconfigured, Occupied, StoreUnavailable
from occupy.history import took_over_message
from occupy.owners import owner_display

__all__ = ["LeaseEndpointsMixin"]


def _unavailable(exc: StoreUnavailable) -> JsonResponse:
    """Return the 503 the page's script reads: ``misconfigured`` when the admin cannot
    lock as configured (the page then stops waiting: only a fix of the settings helps)."""
    return JsonResponse(
        {
            "unavailable": True,
            "misconfigured": isinstance(exc, Misconfigured),
            "message": unavailable_text(exc, "now"),
        },
        status=503,
    )


class LeaseEndpointsMixin(EditLeaseBase):
    """Serve the edit lease's endpoints of a ``ModelAdmin``."""

    def get_urls(self) -> list[Any]:
        """Add ``<object_id>/occupy/{renew,release,status,takeover}/``."""
        opts = self.model._meta
        wrap = self.admin_site.admin_view
        prefix = f"{opts.app_label}_{opts.model_name}_occupy"
        return [
            path(
                "<path:object_id>/occupy/renew/",
                wrap(require_POST(self.renew_lease_view)),
                name=f"{prefix}_renew",
            ),
            path(
                "<path:object_id>/occupy/release/",
                wrap(require_POST(self.release_lease_view)),
                name=f"{prefix}_release",
            ),
            path(
                "<path:object_id>/occupy/status/",
                wrap(require_GET(self.lease_status_view)),
                name=f"{prefix}_status",
            ),
            path(
                "<path:object_id>/occupy/takeover/",
                wrap(require_POST(self.takeover_lease_view)),
                name=f"{prefix}_takeover",
            ),
            *super().get_urls(),
        ]

    def _lease_url(self, name: str, obj: Any) -> str:
        opts = self.model._meta
        return reverse(
            f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_occupy_{name}",
            args=[quote(obj.pk)],
        )

    def _change_url(self, obj: Any) -> str:
        opts = self.model._meta
        return reverse(
            f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_change",
            args=[quote(obj.pk)],
        )

    def _leased_object(self, request: HttpRequest, object_id: str) -> Any:
        """Return the object, or 404 for users who may not change it."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_change_permission(request, obj):
            raise Http404
        return obj

    def _tab(self, data: Any) -> str:
        tab = data.get(TAB_FIELD, "")
        if not TAB.match(tab):
            raise PermissionDenied(_("No valid tab id."))
        return str(tab)

    def _holder_body(
        self, request: HttpRequest, key: str, owner: str | None = None
    ) -> dict[str, Any]:
        """Describe the holder of ``key`` (never its token); ``mine``: whether it is
        the tab whose owner is ``owner``."""
        holder = self._holder(key)
        if holder is None:
            return {"free": True, "mine": False}
        return {
            "free": False,
            "mine": owner is not None and holder.owner == owner,
            "holder": owner_display(holder.owner),
            "same_user": self._is_users(request, holder),
            "since": None if holder.since is None else holder.since.isoformat(),
            "until": holder.expires_at.isoformat(),
        }

    def renew_lease_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """Renew the tab's leases (``reacquire=1``: take them again if they were let
        go, as after the back/forward cache or a takeover); 409 with the holder when
        lost, 503 when the store is down."""
        obj = self._leased_object(request, object_id)
        state = self._state(request, obj, self._tab(request.POST))
        tokens = request.POST.getlist(LEASE_FIELD)
        try:
            try:
                leases = self._resume(request, state, tokens)
            except LeaseLost:
                if request.POST.get("reacquire") != "1":
                    raise
                leases = self._take(request, obj, state.keys, state.owner)
        except (LeaseLost, Occupied):
            try:
                body = {
                    "lost": True,
                    "message": self._lost_message(request, state, saving=False),
                    **self._holder_body(request, state.keys[0], state.owner),
                }
            except StoreUnavailable as e:
                return _unavailable(e)
            return JsonResponse(body, status=409)
        except StoreUnavailable as e:
            return _unavailable(e)
        return JsonResponse(
            {
                "tokens": [lease.token for lease in leases],
                "until": leases[0].expires_at.isoformat(),
                "ttl": self._duration("edit_lease_ttl"),
            }
        )

    def release_lease_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Release the tab's leases (the beacon of ``pagehide``); nobody else's. The
        object may be gone (the tab deleted it): its own key is released then."""
        obj = self.get_object(request, unquote(object_id))
        if obj is not None and not self.has_change_permission(request, obj):
            raise Http404
        if obj is None:
            from occupy.models import object_key

            keys = [object_key(self.model, unquote(object_id))]
        else:
            keys = self._keys(request, obj)
        owner = self._owner(request, self._tab(request.POST))
        tokens = request.POST.getlist(LEASE_FIELD)
        try:
            for key, token in zip(keys, tokens, strict=False):
                try:
                    lease = occupy.resume(key, token, ttl=1, backend=self.get_occupy_backend())
                except (LeaseLost, TypeError, ValueError):
                    continue
                if lease.owner == owner:
                    self._release_all([lease])
        except StoreUnavailable as e:
            return _unavailable(e)
        return HttpResponse(status=204)

    def lease_status_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """Tell who holds the object (never the token); with ``_occupy_tab``, whether
        it is that tab (``mine``) and, if not, what the tab's page should say."""
        obj = self._leased_object(request, object_id)
        keys = self._keys(request, obj)
        tab = request.GET.get(TAB_FIELD, "")
        owner = self._owner(request, tab) if TAB.match(tab) else None
        try:
            body = self._holder_body(request, keys[0], owner)
            if owner is not None and not body["mine"]:
                state = self._state(request, obj, tab)
                body["message"] = self._lost_message(request, state, saving=False)
        except StoreUnavailable as e:
            return _unavailable(e)
        return JsonResponse(body)

    def takeover_lease_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Take the object over for the posting tab and open its change form there:
        the old tab's lease is lost, its fenced saves refused. Another user's lease
        needs :meth:`has_takeover_permission`, decided on the holder the store
        replaces, and the takeover is logged naming that holder."""
        obj = self._leased_object(request, object_id)
        tab = self._tab(request.POST)
        keys = self._keys(request, obj)
        try:
            replaced = self._take_over(request, obj, keys, self._owner(request, tab))
        except TakeoverDenied as e:
            raise PermissionDenied(
                _("Taking over the edit of %(holder)s needs the takeover permission.")
                % {"holder": owner_display(e.holder.owner)}
            ) from e
        except Occupied:
            self.message_user(
                request,
                _("The editor changed while you took over: look again and decide."),
                messages.WARNING,
            )
            return HttpResponseRedirect(self._change_url(obj))
        except StoreUnavailable as e:
            self.message_user(request, unavailable_text(e, "takeover"), messages.ERROR)
            return HttpResponseRedirect(self._change_url(obj))
        for holder in replaced:
            self.log_change(
                request, obj, took_over_message(owner_display(holder.owner), holder.fence)
            )
        return HttpResponseRedirect(f"{self._change_url(obj)}?{urlencode({TAB_FIELD: tab})}")
