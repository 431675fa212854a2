"""``EditLeaseAdminMixin``: one editor per object in the admin, the others read-only.

Opening the change form takes an edit lease for that browser tab: its token lives in
the page (hidden inputs), never in the session, and its owner names the user and the
tab (``admin:user:<pk>:tab:<id>``). Everybody else gets Django's read-only change
form with a banner saying who edits and until when; it turns editable once the lease
frees. ``occupy/admin/edit_lease.js`` renews the lease every ttl/3, checks every few
seconds that the tab still holds it, releases it on ``pagehide`` with a beacon and
takes it again when the page comes back from the back/forward cache. A save is made
only under the tab's lease, checked in the same transaction, and fenced by it for
:class:`~occupy.models.FencedMixin` models: a tab whose lease was taken over cannot
write over the new editor. ``list_editable`` rows, admin actions and deletes take the
objects' keys for their write and are refused, naming the editor, while a tab edits.
The store being down is said on the page (read-only form; a refused save keeps the
user's input), never a server error; so is an admin that cannot lock as configured
(:class:`~occupy.Misconfigured`), in its own words: it does not pass by itself.

The endpoints the script calls are in :mod:`occupy.admin.endpoints`; what both share
(the user-bound leases, the takeover decided in the store) in :mod:`occupy.admin.editing`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.translation import gettext as _

from occupy.admin.editing import STATE, TAB, EditState, new_tab
from occupy.admin.endpoints import LeaseEndpointsMixin
from occupy.admin.fields import LEASE_FIELD, TAB_FIELD
from occupy.admin.history import OccupyHistoryAdminMixin
from occupy.admin.saving import WriteRefused, confirm_leases, once_more_if_stale
from occupy.admin.sentences import KEPT, unavailable_text
from occupy.exceptions import FencedOut, LeaseLost, Misconfigured, Occupied, StoreUnavailable
from occupy.leases import Lease
from occupy.owners import owner_display
from occupy.versions import get_version

__all__ = ["EditLeaseAdminMixin"]


class EditLeaseAdminMixin(OccupyHistoryAdminMixin, LeaseEndpointsMixin):
    """Give a ``ModelAdmin``'s change form an edit lease per browser tab.

    Attributes: ``occupy_backend`` (the occupy backend alias of the leases; by default
    the model's ``occupy_backend``, the store ``obj.occupy()`` locks the object in),
    ``edit_lease_ttl`` (seconds; renewed every third of it), ``edit_lease_poll`` (how
    often a read-only page asks whether it may edit) and ``edit_lease_check`` (how
    often an editing page asks whether it still holds the lease). ``manage.py check``
    reports a value that cannot be used (``occupy.E102``, ``occupy.E304``), and an
    ``occupy_backend`` other than the model's (``occupy.W303``); a page that meets one
    is read-only and says the admin's lock settings are wrong, never a server error.

    Hooks: :meth:`get_occupy_keys` (lock related objects too: all or nothing, in
    sorted order, like :class:`~occupy.lock_many`), :meth:`has_takeover_permission`.
    Taking over another user's lease needs ``occupy.force_release_occupation`` or
    ``<app_label>.takeover_<model_name>`` and is written to the admin log; the same
    user may always move the lease to another of their tabs ("edit here instead").
    A custom ``change_form_template`` should extend ``admin/occupy/change_form.html``.
    """

    change_form_template = "admin/occupy/change_form.html"

    # --- what Django asks ------------------------------------------------------------
    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Answer ``False`` for the object another tab edits, or while the store is
        down (Django then renders its read-only change form); no side effect: the
        lease was decided before."""
        state = getattr(request, STATE, None)
        if obj is not None and state is not None and state.read_only:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Answer ``False`` on a change form that does not hold the lease (no *Delete*
        button there); :meth:`delete_view` itself holds the key to delete."""
        state = getattr(request, STATE, None)
        if obj is not None and state is not None and (state.read_only or state.name == "lost"):
            return False
        return super().has_delete_permission(request, obj)

    @property
    def media(self) -> forms.Media:
        return super().media + forms.Media(
            js=["occupy/admin/edit_lease.js"], css={"all": ["occupy/admin/edit_lease.css"]}
        )

    # --- delete ----------------------------------------------------------------------
    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Delete only while nobody else edits the object: the confirmed delete holds
        its key (taken from the user's own tab if that edits it) around Django's
        delete and lets it go after; held by another user, it is refused. The
        confirmation page names whoever edits it."""
        parent = super().delete_view
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return parent(request, object_id, extra_context)
        keys = self._keys(request, obj)
        if request.method != "POST":
            try:
                holder = self._holder(keys[0])
            except StoreUnavailable as e:
                self.message_user(request, unavailable_text(e, "delete"), messages.WARNING)
            else:
                if holder is not None and not self._is_users(request, holder):
                    self.message_user(
                        request, self._busy(request, holder, obj, deleted=True), messages.WARNING
                    )
            return parent(request, object_id, extra_context)
        owner = self._owner(request, new_tab())
        leases: list[Lease] = []
        try:
            for key in sorted(keys):
                leases.append(
                    self._take_one(
                        request, obj, key, owner, may=lambda h: self._is_users(request, h)
                    )
                )
        except Occupied as e:
            self._release_all(leases)
            self.message_user(
                request, self._busy(request, e.holder, obj, deleted=True), messages.ERROR
            )
            return HttpResponseRedirect(self._change_url(obj))
        except StoreUnavailable as e:
            self._release_all(leases)
            self.message_user(request, unavailable_text(e, "delete"), messages.ERROR)
            return HttpResponseRedirect(self._change_url(obj))
        try:
            return parent(request, object_id, extra_context)
        finally:
            self._release_all(leases)

    # --- changelist: list_editable and actions -------------------------------------------
    def _hold_for_write(self, request: HttpRequest, objs: list[Any]) -> list[Lease]:
        """Take the keys of ``objs`` for a changelist write (nobody may hold them);
        raise :class:`WriteRefused` with the sentence naming the editor."""
        owner = self._owner(request, new_tab())
        by_key = {key: obj for obj in objs for key in self._keys(request, obj)}
        leases: list[Lease] = []
        try:
            for key in sorted(by_key):
                leases.append(self._take_one(request, by_key[key], key, owner, may=lambda h: False))
        except Occupied as e:
            self._release_all(leases)
            obj = by_key[e.key or ""]
            raise WriteRefused(self._busy(request, e.holder, obj, deleted=False)) from e
        except StoreUnavailable as e:
            self._release_all(leases)
            raise WriteRefused(unavailable_text(e, "save")) from e
        return leases

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Hold the keys of the ``list_editable`` rows a save changes, before Django's
        transaction and until it is over: refused (no row saved) with a message naming
        the editor while a tab edits one of them."""
        try:
            held = self._hold_for_write(request, self._list_changes(request))
        except WriteRefused as e:
            refused = _("Nothing was saved: %(reason)s") % {"reason": e}
            self.message_user(request, refused, messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
        try:
            return super().changelist_view(request, extra_context)
        finally:
            self._release_all(held)

    def _list_changes(self, request: HttpRequest) -> list[Any]:
        """Return the objects a ``list_editable`` save changes (none if it is not one,
        or if its forms are invalid: Django shows their errors)."""
        if request.method != "POST" or not self.list_editable or "_save" not in request.POST:
            return []
        formset_class = self.get_changelist_formset(request)
        prefix = formset_class.get_default_prefix()
        pk_name = self.model._meta.pk.name
        try:
            count = int(request.POST.get(f"{prefix}-TOTAL_FORMS", "0"))
        except ValueError:
            return []
        pks = [request.POST.get(f"{prefix}-{i}-{pk_name}") for i in range(min(count, 1000))]
        queryset = self.get_queryset(request).filter(pk__in=[pk for pk in pks if pk])
        formset = formset_class(request.POST, request.FILES, queryset=queryset)
        if not formset.is_valid():
            return []
        return [form.instance for form in formset.forms if form.has_changed()]

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        """Run every action holding the selected objects' keys: refused, with a
        message naming the editor, while a tab edits one of them. (``action_location``
        is Django 6.1's, passed on when Django gives it.)"""
        where = {} if action_location is None else {"action_location": action_location}
        actions: dict[str, Any] = super().get_actions(request, **where)
        return {name: _with_func(action, self._guarded) for name, action in actions.items()}

    def _guarded(self, func: Any) -> Any:
        @functools.wraps(func)
        def action(modeladmin: Any, request: HttpRequest, queryset: Any) -> Any:
            try:
                leases = self._hold_for_write(request, list(queryset))
            except WriteRefused as e:
                refused = _("Nothing was done: %(reason)s") % {"reason": e}
                self.message_user(request, refused, messages.ERROR)
                return None
            try:
                return func(modeladmin, request, queryset)
            finally:
                self._release_all(leases)

        return action

    # --- the change form -------------------------------------------------------------
    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm[Any]]:
        """Return the form, refusing the submission when the tab's lease was lost or
        the store is down (the form keeps the user's input and says why, once)."""
        form = super().get_form(request, obj, change=change, **kwargs)
        state = getattr(request, STATE, None)
        if state is None or state.error is None:
            return form
        error = state.error

        # A subclass of the form class Django built for this request: a variable base.
        class RefusedForm(form):  # type: ignore[misc, valid-type]
            def clean(self) -> Any:
                super().clean()
                raise ValidationError(error, code="lease_lost")

        return RefusedForm

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """Lease the object for this tab (GET) or check the tab's lease (POST), then
        let Django render or save; a save whose lease is lost, or whose store is down,
        is refused, rolled back, and the form shown again with the user's input."""
        parent = super().changeform_view
        if object_id is None or request.method not in ("GET", "POST"):
            return parent(request, object_id, form_url, extra_context)
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not super().has_change_permission(request, obj):
            return parent(request, object_id, form_url, extra_context)
        state = (
            self._post_state(request, obj)
            if request.method == "POST"
            else self._get_state(request, obj)
        )
        setattr(request, STATE, state)
        try:
            response = once_more_if_stale(
                self.model, lambda: parent(request, object_id, form_url, extra_context)
            )
        except (LeaseLost, FencedOut):  # the save was rolled back
            state.error = self._lost_message(request, state)
            state.leases = []
            response = parent(request, object_id, form_url, extra_context)
        except StoreUnavailable as e:  # the save was rolled back
            state.posted_tokens, state.leases = state.tokens, []
            state.refused(e)
            state.error = f"{unavailable_text(e, 'save')} {KEPT}"
            response = parent(request, object_id, form_url, extra_context)
        if request.method == "POST" and state.leases and response.status_code in (301, 302, 303):
            self._release_all(state.leases)  # saved: this tab's edit is over
        return response

    def _get_state(self, request: HttpRequest, obj: Any) -> EditState:
        tab = request.GET.get(TAB_FIELD, "")
        tab = tab if TAB.match(tab) else new_tab()
        state = self._state(request, obj, tab)
        try:
            state.leases = self._take(request, obj, state.keys, state.owner)
        except Occupied as e:
            state.holder = e.holder
        except StoreUnavailable as e:
            state.refused(e)
        return state

    def _post_state(self, request: HttpRequest, obj: Any) -> EditState:
        tab = request.POST.get(TAB_FIELD, "")
        tab = tab if TAB.match(tab) else new_tab()
        state = self._state(request, obj, tab)
        tokens = request.POST.getlist(LEASE_FIELD)
        try:
            state.leases = self._resume(request, state, tokens)
        except LeaseLost:
            state.error = self._lost_message(request, state)
        except StoreUnavailable as e:
            state.refused(e)
            state.posted_tokens = tokens
            state.error = f"{unavailable_text(e, 'save')} {KEPT}"
        return state

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        """Add the lease banner's context (``occupy_edit``)."""
        state = getattr(request, STATE, None)
        if state is not None and obj is not None:
            context["occupy_edit"] = self.edit_lease_context(request, obj, state)
        return super().render_change_form(
            request, context, add=add, change=change, form_url=form_url, obj=obj
        )

    def edit_lease_context(
        self, request: HttpRequest, obj: Any, state: EditState
    ) -> dict[str, Any]:
        """Return what the banner and the script need to know."""
        holder = state.holder
        same_user = self._is_users(request, holder)
        return {
            "state": state.name,
            "misconfigured": state.misconfigured,
            "tab": state.tab,
            "tokens": state.tokens,
            "until": state.leases[0].expires_at if state.leases else None,
            "ttl": self._seconds_text("edit_lease_ttl"),
            "poll": self._seconds_text("edit_lease_poll"),
            "check": self._seconds_text("edit_lease_check"),
            "holder": None if holder is None else owner_display(holder.owner),
            "since": None if holder is None else holder.since,
            "holder_until": None if holder is None else holder.expires_at,
            "same_user": same_user,
            "can_take_over": same_user
            or (holder is not None and self.has_takeover_permission(request, obj)),
            "error": state.error,
            "version": get_version(obj),
            "urls": {
                name: self._lease_url(name, obj)
                for name in ("renew", "release", "status", "takeover")
            },
        }

    def _seconds_text(self, attribute: str) -> str:
        """Return a duration as the page's script reads it; empty when it is
        misconfigured (the page then says the settings are wrong, and the script keeps
        its own default)."""
        try:
            return f"{self._duration(attribute):g}"
        except Misconfigured:
            return ""

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

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """Save the inlines, then confirm the leases are still held, inside the admin's
        transaction: a lease lost meanwhile rolls the whole save back.

        On PostgreSQL the save's own transaction holds each key while its lease is the
        tab's, up to its commit (see :func:`~occupy.admin.saving.confirm_leases`)."""
        super().save_related(request, form, formsets, change)
        state = getattr(request, STATE, None)
        if change and state is not None:
            confirm_leases(self.get_occupy_backend(), form.instance, state.leases)


def _with_func(action: Any, wrap: Any) -> Any:
    """Return ``action`` with its function wrapped: a copy of Django 6.1's ``Action``
    (a dataclass), or of the ``(func, name, description)`` tuple of Django 5.2."""
    if dataclasses.is_dataclass(action) and not isinstance(action, type):
        return dataclasses.replace(action, func=wrap(getattr(action, "func")))  # noqa: B009
    func, *rest = action
    return (wrap(func), *rest)
