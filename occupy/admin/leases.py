"""``EditLeaseAdminMixin``: one editor per object in the admin, the others read-only.

Opening the change form takes an edit lease for that browser tab: its token lives in
the page (hidden inputs), never in the session, and its owner names the user and the
tab (``admin:user:<pk>:tab:<id>``). Everybody else gets Django's read-only change
form with a banner saying who edits and until when; it turns editable once the lease
frees. ``occupy/admin/edit_lease.js`` renews the lease every ttl/3, releases it on
``pagehide`` with a beacon and takes it again when the page comes back from the
back/forward cache. A save is made only under the tab's lease, checked in the same
transaction, and fenced by it for :class:`~occupy.models.FencedMixin` models: a tab
whose lease was taken over cannot write over the new editor.
"""

from __future__ import annotations

import re
import secrets
from contextlib import suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import path, reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

import occupy
from occupy.admin.owners import admin_owner, owner_display, owner_user_pk
from occupy.exceptions import FencedOut, LeaseLost, Occupied
from occupy.leases import Holder, Lease

__all__ = ["EditLeaseAdminMixin"]

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = object

_TAB = re.compile(r"^[0-9a-f]{16}$")
#: The attribute of the request that carries the change view's lease state.
STATE = "_occupy_edit"


@dataclass
class EditState:
    """The edit lease of one change-form request."""

    tab: str
    owner: str
    keys: list[str]
    leases: list[Lease] = field(default_factory=list)
    #: Who holds the object when this request could not lease it.
    holder: Holder | None = None
    #: Why a save was refused (the lease was lost); the form keeps the user's input.
    error: str | None = None
    #: The requesting user's primary key, as text.
    user_pk: str | None = None

    @property
    def name(self) -> str:
        """Return ``"editing"``, ``"lost"`` or ``"readonly"``."""
        if self.error is not None:
            return "lost"
        return "editing" if self.leases else "readonly"


def _new_tab() -> str:
    return secrets.token_hex(8)


class EditLeaseAdminMixin(_ModelAdmin):
    """Give a ``ModelAdmin``'s change form an edit lease per browser tab.

    Hooks: :meth:`get_occupy_keys` (lock related objects too: all or nothing, in
    sorted order, like :class:`~occupy.lock_many`), :meth:`has_takeover_permission`.
    Taking over another user's lease needs ``occupy.force_release_occupation`` or
    ``<app_label>.takeover_<model_name>`` and is written to the admin log; the same
    user may always move the lease to another of their tabs ("edit here instead").
    A custom ``change_form_template`` should extend ``admin/occupy/change_form.html``.
    """

    #: Lease length in seconds; the page renews it every third of it. Chrome wakes the
    #: timers of a tab hidden for 5 minutes only once a minute, so keep it >= 120 s.
    edit_lease_ttl: float = 120
    #: The occupy backend alias the leases live in.
    edit_lease_backend: str = "default"
    #: How often, in seconds, a read-only page asks whether the lease is free.
    edit_lease_poll: float = 2
    change_form_template = "admin/occupy/change_form.html"

    # --- hooks ---------------------------------------------------------------------
    def get_occupy_key(self, obj: Any) -> str:
        """Return the lock key of ``obj`` (its ``occupy_key``, else ``app.model:pk``)."""
        key = getattr(obj, "occupy_key", None)
        if key is None:
            from occupy.models import object_key

            key = object_key(type(obj), obj.pk)
        return key

    def get_occupy_keys(self, request: HttpRequest, obj: Any) -> list[str]:
        """Return the keys an editor of ``obj`` holds: its own key first, then those of
        related objects edited on the same page (inlines), if you add them."""
        return [self.get_occupy_key(obj)]

    def has_takeover_permission(self, request: HttpRequest, obj: Any) -> bool:
        """Return whether the user may take another user's edit lease over."""
        opts = obj._meta
        user = request.user
        return bool(user.has_perm("occupy.force_release_occupation")
                    or user.has_perm(f"{opts.app_label}.takeover_{opts.model_name}"))

    # --- what Django asks ------------------------------------------------------------
    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Answer ``False`` for the object another tab edits (Django then renders its
        read-only change form); no side effect: the lease was decided before."""
        state = getattr(request, STATE, None)
        if obj is not None and state is not None and state.name == "readonly":
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Answer ``False`` on the read-only form of an object another tab edits (no
        *Delete* button there); :meth:`delete_view` itself holds the key to delete."""
        state = getattr(request, STATE, None)
        if obj is not None and state is not None and state.name == "readonly":
            return False
        return super().has_delete_permission(request, obj)

    def delete_view(self, request: HttpRequest, object_id: str,
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """Delete only while nobody edits the object: the confirmed delete holds its
        key (``timeout=0``) around Django's delete; held by a tab, it is refused."""
        parent = super().delete_view
        if request.method != "POST":
            return parent(request, object_id, extra_context)
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return parent(request, object_id, extra_context)
        keys = self._keys(request, obj)
        owner = self._owner(request, _new_tab())
        try:
            leases = self._take(keys, owner)
        except Occupied as e:
            holder = occupy.holder(e.key or keys[0], using=self.edit_lease_backend)
            who = "someone" if holder is None else owner_display(holder.owner)
            from django.contrib import messages

            self.message_user(request,
                              f"Not deleted: {who} is editing it.", messages.ERROR)
            return HttpResponseRedirect(self._change_url(obj))
        try:
            return parent(request, object_id, extra_context)
        finally:
            self._release_all(leases)

    @property
    def media(self) -> forms.Media:
        return super().media + forms.Media(js=["occupy/admin/edit_lease.js"])

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False,
                 **kwargs: Any) -> type[forms.ModelForm[Any]]:
        """Return the form, refusing the submission when the tab's lease was lost."""
        form = super().get_form(request, obj, change=change, **kwargs)
        state = getattr(request, STATE, None)
        if state is None or state.error is None:
            return form
        error = state.error

        # A subclass of the form class Django built for this request: a variable base.
        class LeaseLostForm(form):  # type: ignore[misc, valid-type]
            def clean(self) -> Any:
                super().clean()
                raise ValidationError(error, code="lease_lost")

        return LeaseLostForm

    def changeform_view(self, request: HttpRequest, object_id: str | None = None,
                        form_url: str = "", extra_context: dict[str, Any] | None = None
                        ) -> HttpResponse:
        """Lease the object for this tab (GET) or check the tab's lease (POST), then
        let Django render or save; a save whose lease is lost is refused, rolled back,
        and the form shown again with the user's input."""
        parent = super().changeform_view
        if object_id is None or request.method not in ("GET", "POST"):
            return parent(request, object_id, form_url, extra_context)
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not super().has_change_permission(request, obj):
            return parent(request, object_id, form_url, extra_context)
        state = self._post_state(request, obj) if request.method == "POST" else \
            self._get_state(request, obj)
        setattr(request, STATE, state)
        try:
            response = parent(request, object_id, form_url, extra_context)
        except (LeaseLost, FencedOut):  # the save was rolled back
            state.error = self._lost_message(state)
            state.leases = []
            response = parent(request, object_id, form_url, extra_context)
        if request.method == "POST" and state.leases and response.status_code in (301, 302,
                                                                                  303):
            self._release_all(state.leases)  # saved: this tab's edit is over
        return response

    def render_change_form(self, request: HttpRequest, context: dict[str, Any],
                           add: bool = False, change: bool = False, form_url: str = "",
                           obj: Any = None) -> HttpResponse:
        """Add the lease banner's context (``occupy_edit``)."""
        state = getattr(request, STATE, None)
        if state is not None and obj is not None:
            context["occupy_edit"] = self.edit_lease_context(request, obj, state)
        return super().render_change_form(request, context, add=add, change=change,
                                          form_url=form_url, obj=obj)

    def edit_lease_context(self, request: HttpRequest, obj: Any, state: EditState
                           ) -> dict[str, Any]:
        """Return what the banner and the script need to know."""
        holder = state.holder
        same_user = holder is not None and owner_user_pk(holder.owner) == str(request.user.pk)
        return {
            "state": state.name,
            "tab": state.tab,
            "tokens": [lease.token for lease in state.leases],
            "until": state.leases[0].expires_at if state.leases else None,
            "ttl": f"{self.edit_lease_ttl:g}",
            "poll": f"{self.edit_lease_poll:g}",
            "holder": None if holder is None else owner_display(holder.owner),
            "since": None if holder is None else holder.since,
            "holder_until": None if holder is None else holder.expires_at,
            "same_user": same_user,
            "can_take_over": same_user or (holder is not None
                                           and self.has_takeover_permission(request, obj)),
            "error": state.error,
            "version": getattr(obj, "version", None),
            "urls": {name: self._lease_url(name, obj)
                     for name in ("renew", "release", "status", "takeover")},
        }

    # --- leases ------------------------------------------------------------------------
    def _keys(self, request: HttpRequest, obj: Any) -> list[str]:
        keys = self.get_occupy_keys(request, obj)
        main = keys[0]
        return [main, *sorted(set(keys) - {main})]

    def _state(self, request: HttpRequest, obj: Any, tab: str) -> EditState:
        return EditState(tab=tab, owner=self._owner(request, tab), keys=self._keys(request, obj),
                         user_pk=str(request.user.pk))

    def _owner(self, request: HttpRequest, tab: str) -> str:
        return admin_owner(request.user.pk, tab)

    def _take(self, keys: list[str], owner: str, tokens: list[str] | None = None) -> list[Lease]:
        """Take every key for ``owner`` or none: in sorted order (no deadlock between
        two pages locking the same objects), presenting ``tokens`` where given; a key
        this very tab holds (its owner) is taken over from itself."""
        held = dict(zip(keys, tokens or [], strict=False))
        leases: dict[str, Lease] = {}
        try:
            for key in sorted(keys):
                current = occupy.holder(key, using=self.edit_lease_backend)
                if current is not None and current.owner == owner and key not in held:
                    leases[key] = occupy.takeover(key, owner=owner, ttl=self.edit_lease_ttl,
                                                  reentrant=False, using=self.edit_lease_backend)
                else:
                    leases[key] = occupy.acquire(
                        key, owner=owner, ttl=self.edit_lease_ttl, timeout=0,
                        token=held.get(key), reentrant=False, using=self.edit_lease_backend)
        except BaseException:
            self._release_all(list(leases.values()))
            raise
        return [leases[key] for key in keys]

    def _resume(self, keys: list[str], tokens: list[str]) -> list[Lease]:
        if len(tokens) != len(keys):
            raise LeaseLost("The form carries no edit lease for these objects.", key=keys[0])
        try:
            return [occupy.resume(key, token, ttl=self.edit_lease_ttl,
                                  using=self.edit_lease_backend)
                    for key, token in zip(keys, tokens, strict=True)]
        except (TypeError, ValueError) as e:  # a token that cannot be one
            raise LeaseLost(str(e), key=keys[0]) from e

    def _release_all(self, leases: list[Lease]) -> None:
        for lease in leases:
            with suppress(LeaseLost):
                occupy.release(lease)

    def _get_state(self, request: HttpRequest, obj: Any) -> EditState:
        tab = request.GET.get("_occupy_tab", "")
        tab = tab if _TAB.match(tab) else _new_tab()
        state = self._state(request, obj, tab)
        try:
            state.leases = self._take(state.keys, state.owner)
        except Occupied as e:
            state.holder = occupy.holder(e.key or state.keys[0], using=self.edit_lease_backend)
            if state.holder is None:  # freed in between: one more try
                with suppress(Occupied):
                    state.leases = self._take(state.keys, state.owner)
        return state

    def _post_state(self, request: HttpRequest, obj: Any) -> EditState:
        tab = request.POST.get("_occupy_tab", "")
        tab = tab if _TAB.match(tab) else _new_tab()
        state = self._state(request, obj, tab)
        try:
            state.leases = self._resume(state.keys, request.POST.getlist("_occupy_lease"))
        except LeaseLost:
            state.error = self._lost_message(state)
        return state

    def _lost_message(self, state: EditState, *, saving: bool = True) -> str:
        """Say why the tab's lease is gone and what became of the user's input."""
        holder = occupy.holder(state.keys[0], using=self.edit_lease_backend)
        state.holder = holder
        if holder is None:
            who = "Your edit lease expired"
        elif owner_user_pk(holder.owner) == str(getattr(state, "user_pk", None)):
            who = "You are editing this in another tab"
        else:
            who = f"{owner_display(holder.owner)} took over the editing"
        if saving:
            return (f"{who}: nothing was saved. Your changes are still in this form; "
                    "reload the page to edit the current version.")
        return (f"{who}. Your changes are still in this form but cannot be saved from "
                "here; reload the page to edit the current version.")

    # --- the endpoints the script calls --------------------------------------------------
    def get_urls(self) -> list[Any]:
        """Add ``<object_id>/occupy/{renew,release,status,takeover}/``."""
        opts = self.model._meta
        wrap = self.admin_site.admin_view
        prefix = f"{opts.app_label}_{opts.model_name}_occupy"
        return [
            path("<path:object_id>/occupy/renew/", wrap(require_POST(self.renew_lease_view)),
                 name=f"{prefix}_renew"),
            path("<path:object_id>/occupy/release/",
                 wrap(require_POST(self.release_lease_view)), name=f"{prefix}_release"),
            path("<path:object_id>/occupy/status/", wrap(require_GET(self.lease_status_view)),
                 name=f"{prefix}_status"),
            path("<path:object_id>/occupy/takeover/",
                 wrap(require_POST(self.takeover_lease_view)), name=f"{prefix}_takeover"),
            *super().get_urls(),
        ]

    def _lease_url(self, name: str, obj: Any) -> str:
        opts = self.model._meta
        return reverse(f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_occupy_"
                       f"{name}", args=[quote(obj.pk)])

    def _leased_object(self, request: HttpRequest, object_id: str) -> Any:
        """Return the object, or 404 for users who may not change it."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_change_permission(request, obj):
            raise Http404
        return obj

    def _tab(self, request: HttpRequest) -> str:
        tab = request.POST.get("_occupy_tab", "")
        if not _TAB.match(tab):
            raise PermissionDenied("No valid tab id.")
        return tab

    def _holder_body(self, request: HttpRequest, key: str) -> dict[str, Any]:
        holder = occupy.holder(key, using=self.edit_lease_backend)
        if holder is None:
            return {"free": True}
        return {"free": False, "holder": owner_display(holder.owner),
                "same_user": owner_user_pk(holder.owner) == str(request.user.pk),
                "since": None if holder.since is None else holder.since.isoformat(),
                "until": holder.expires_at.isoformat()}

    def renew_lease_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """Renew the tab's leases (``reacquire=1``: take them again if they were let
        go, as after the back/forward cache); 409 with the holder when lost."""
        obj = self._leased_object(request, object_id)
        tab = self._tab(request)
        state = self._state(request, obj, tab)
        keys = state.keys
        tokens = request.POST.getlist("_occupy_lease")
        try:
            if request.POST.get("reacquire") == "1":
                leases = self._take(keys, state.owner, tokens)
            else:
                leases = self._resume(keys, tokens)
        except (LeaseLost, Occupied):
            body = {"lost": True, "message": self._lost_message(state, saving=False),
                    **self._holder_body(request, keys[0])}
            return JsonResponse(body, status=409)
        return JsonResponse({"tokens": [lease.token for lease in leases],
                             "until": leases[0].expires_at.isoformat(),
                             "ttl": self.edit_lease_ttl})

    def release_lease_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Release the tab's leases (the beacon of ``pagehide``); nobody else's."""
        obj = self._leased_object(request, object_id)
        keys = self._keys(request, obj)
        tokens = request.POST.getlist("_occupy_lease")
        for key, token in zip(keys, tokens, strict=False):
            try:
                lease = occupy.resume(key, token, ttl=1, using=self.edit_lease_backend)
            except (LeaseLost, TypeError, ValueError):
                continue
            with suppress(LeaseLost):
                occupy.release(lease)
        return HttpResponse(status=204)

    def lease_status_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """Tell who holds the object (never the token)."""
        obj = self._leased_object(request, object_id)
        return JsonResponse(self._holder_body(request, self._keys(request, obj)[0]))

    def takeover_lease_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Take the object over for the posting tab and open its change form there:
        the old tab's lease is lost, its fenced saves refused. Another user's lease
        needs :meth:`has_takeover_permission` and the takeover is logged."""
        obj = self._leased_object(request, object_id)
        tab = self._tab(request)
        keys = self._keys(request, obj)
        holder = occupy.holder(keys[0], using=self.edit_lease_backend)
        same_user = holder is not None and owner_user_pk(holder.owner) == str(request.user.pk)
        if holder is not None and not same_user and not self.has_takeover_permission(request,
                                                                                    obj):
            raise PermissionDenied("Taking over another user's edit needs the takeover "
                                   "permission.")
        owner = self._owner(request, tab)
        for key in sorted(keys):
            occupy.takeover(key, owner=owner, ttl=self.edit_lease_ttl, reentrant=False,
                            using=self.edit_lease_backend)
        if holder is not None and not same_user:
            self.log_change(request, obj,
                            f"Took over the edit lease from {owner_display(holder.owner)} "
                            f"(fence {holder.fence}).")
        return HttpResponseRedirect(f"{self._change_url(obj)}?{urlencode({'_occupy_tab': tab})}")

    def _change_url(self, obj: Any) -> str:
        opts = self.model._meta
        return reverse(f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_change",
                       args=[quote(obj.pk)])

    # --- the save ------------------------------------------------------------------------
    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Fence the save by the tab's lease (``FencedMixin`` models)."""
        state = getattr(request, STATE, None)
        if change and state is not None and state.leases:
            lease = state.leases[0]
            fence_key = getattr(obj, "fence_key", None)
            if fence_key is not None and fence_key() == lease.key:
                obj.use_lease(lease)
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any,
                     change: bool) -> None:
        """Save the inlines, then confirm the leases are still held, inside the admin's
        transaction: a lease lost meanwhile rolls the whole save back."""
        super().save_related(request, form, formsets, change)
        state = getattr(request, STATE, None)
        if change and state is not None:
            for lease in state.leases:
                lease.ensure_held()
