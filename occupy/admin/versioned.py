"""``VersionedAdminMixin``: a change form saved over a newer row is refused, never
saved, and the user sees field by field what they sent and what the row holds now.

The version the form was rendered from travels as a hidden field (``occupy_version``)
the mixin adds itself; the save compares it strictly in its ``UPDATE``
(:meth:`~occupy.models.VersionedMixin.expect_version`), so the check and the write are
one statement. Beside it, a signed snapshot of the values the form was rendered with
(``occupy_rendered``) tells the conflict page which fields the user changed: only those
are theirs to keep; every other field keeps the value someone else saved meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.contrib.admin.options import BaseModelAdmin, InlineModelAdmin
from django.contrib.admin.utils import flatten_fieldsets, quote, unquote
from django.core import checks, signing
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from occupy.admin.conflicts import RENDERED_FIELD, VERSION_FIELD, conflict_rows, resubmitted
from occupy.admin.editing import STATE
from occupy.admin.fields import TAB_FIELD
from occupy.exceptions import VersionConflict
from occupy.versions import get_version

__all__ = ["VERSION_FIELD", "VersionedAdminMixin", "VersionedInlineMixin", "versioned_form"]

_RENDERED_SALT = "occupy.admin.rendered"
#: The request attributes keeping the submitted forms for the conflict page.
_FORM = "_occupy_version_form"
_FORMSETS = "_occupy_version_formsets"

if TYPE_CHECKING:
    _BaseModelAdmin = BaseModelAdmin[Any]
    _InlineModelAdmin = InlineModelAdmin[Any, Any]
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _BaseModelAdmin = _InlineModelAdmin = _ModelAdmin = object


def _plain(value: Any) -> Any:
    """Return a form value as JSON can carry it (lists of text, text, numbers)."""
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def _without_hidden(names: Iterable[str]) -> list[str]:
    """Return ``names`` but those of the two hidden fields occupy adds to a form."""
    return [name for name in names if name not in (VERSION_FIELD, RENDERED_FIELD)]


def _user_fields(form: forms.BaseForm) -> list[str]:
    """Return the names of ``form``'s fields but the two hidden ones occupy adds."""
    return _without_hidden(form.fields)


def _changed_since(form: forms.BaseForm, rendered: dict[str, Any]) -> set[str]:
    """Return the fields of bound ``form`` whose submitted value differs from the one
    in ``rendered`` (what the form was rendered with; a field missing there: changed)."""
    return {
        name
        for name in _user_fields(form)
        if name not in rendered or form.fields[name].has_changed(rendered[name], form[name].data)
    }


def _snapshot(form: forms.BaseForm) -> str:
    """Return the signed values ``form`` is rendered with: what the user saw, against
    which a submitted value is a change of theirs."""
    values = {name: _plain(form[name].value()) for name in _user_fields(form)}
    return signing.dumps(values, salt=_RENDERED_SALT, compress=True)


def _expect_version(form: forms.ModelForm[Any]) -> None:
    """Give the version ``form`` carries to its instance as the save's precondition;
    an existing object's form without one is invalid."""
    if form.instance.pk is None or form.instance._state.adding:
        return
    version = form.cleaned_data.get(VERSION_FIELD)
    if version is None:
        raise forms.ValidationError(
            _("This form carries no version: reload the page and make your change again."),
            code="version_required",
        )
    form.instance.expect_version(version)


def versioned_form(form: type[forms.ModelForm[Any]]) -> type[forms.ModelForm[Any]]:
    """Return ``form`` (a model form) with the hidden version field: rendered with the
    instance's version, given back to the instance as the save's precondition."""
    if VERSION_FIELD in form.base_fields:
        return form

    # A subclass of a form class built at run time (Django's form factory): a variable base.
    class VersionedForm(form):  # type: ignore[misc, valid-type]
        occupy_version = forms.IntegerField(widget=forms.HiddenInput, required=False, min_value=1)
        occupy_rendered = forms.CharField(widget=forms.HiddenInput, required=False)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if self.instance.pk is not None:
                self.fields[VERSION_FIELD].initial = get_version(self.instance)
                if not self.is_bound:
                    self.fields[RENDERED_FIELD].initial = _snapshot(self)

        @cached_property
        def changed_data(self) -> list[str]:
            # The version is no change of the user's: a stale but untouched row (inline,
            # list_editable) is not saved, and the history does not mention it.
            return _without_hidden(super().changed_data)

        def changed_by_user(self) -> set[str] | None:
            """Return the fields whose submitted value differs from the one the form
            was rendered with, or ``None`` if that is not known (no or a bad snapshot)."""
            try:
                rendered = signing.loads(self[RENDERED_FIELD].data or "", salt=_RENDERED_SALT)
            except signing.BadSignature:
                return None
            return _changed_since(self, rendered)

        def clean(self) -> Any:
            cleaned = super().clean()
            _expect_version(self)
            return cleaned

    VersionedForm.__name__ = form.__name__
    return VersionedForm


class _PkWithVersion(forms.HiddenInput):
    """The changelist's hidden primary key, followed by the row's hidden version: the
    only per-row hidden input Django's ``list_editable`` table renders."""

    def __init__(self, version: Any, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.version = version

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> SafeString:
        return format_html(
            "{}{}", super().render(name, value, attrs, renderer), self.version.as_hidden()
        )


class _VersionFieldMixin(_BaseModelAdmin):
    """Put the hidden version field in the fieldsets of an editable form."""

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Add ``occupy.E101``: the model has no version (no ``VersionedMixin``);
        ``occupy.E301``: its primary key is composite, which Django's admin does not
        support (a model admin is refused when registered; this finds an inline)."""
        from occupy.checks import composite_pk_unsupported
        from occupy.models import VersionedMixin

        errors = super().check(**kwargs)
        model = self.model
        errors += composite_pk_unsupported(model, type(self), "Django's admin")
        if not issubclass(model, VersionedMixin):
            errors.append(
                checks.Error(
                    f"{type(self).__name__} adds occupy's version field, which needs a model "
                    f"with occupy.models.VersionedMixin; {model._meta.label} has none.",
                    hint="Add VersionedMixin to the model, or drop the occupy admin mixin.",
                    obj=type(self),
                    id="occupy.E101",
                )
            )
        return errors

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        """Leave the version out; :meth:`get_fieldsets` puts it where it belongs."""
        fields = super().get_fields(request, obj)
        return [name for name in fields if name not in (VERSION_FIELD, RENDERED_FIELD)]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        """Add the hidden version to the last fieldset of an editable change form."""
        fieldsets = list(super().get_fieldsets(request, obj))
        if (
            obj is None
            or not fieldsets
            or VERSION_FIELD in flatten_fieldsets(fieldsets)
            or not self.has_change_permission(request, obj)
        ):
            return fieldsets
        name, options = fieldsets[-1]
        fieldsets[-1] = (
            name,
            {**options, "fields": [*options["fields"], VERSION_FIELD, RENDERED_FIELD]},
        )
        return fieldsets

    def _form_fields(self, request: HttpRequest, obj: Any, kwargs: dict[str, Any]) -> None:
        """Leave the version out of the ``fields`` given to Django's form factory (it is
        no model field: the form declares it)."""
        if "fields" not in kwargs:
            kwargs["fields"] = flatten_fieldsets(self.get_fieldsets(request, obj))
        if kwargs["fields"] is not None:
            kwargs["fields"] = [
                name for name in kwargs["fields"] if name not in (VERSION_FIELD, RENDERED_FIELD)
            ]


class VersionedInlineMixin(_VersionFieldMixin, _InlineModelAdmin):
    """Give each form of an inline (``TabularInline``, ``StackedInline``) of a
    :class:`~occupy.models.VersionedMixin` model its own hidden version: a stale inline
    row is refused like the main form (the parent admin needs
    :class:`VersionedAdminMixin` to answer with the conflict page)."""

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        """Return the formset whose forms carry their row's version."""
        self._form_fields(request, obj, kwargs)
        formset = super().get_formset(request, obj, **kwargs)
        formset.form = versioned_form(formset.form)
        return formset


class VersionedAdminMixin(_VersionFieldMixin, _ModelAdmin):
    """Refuse stale change forms of a :class:`~occupy.models.VersionedMixin` model.

    A save whose row moved on since the form was rendered raises
    :class:`~occupy.VersionConflict` inside the admin's transaction (nothing is
    written) and answers with ``admin/occupy/version_conflict.html``: each field where
    the submitted value and the current one differ, a button to save yours on the
    current version, and a link to the current object.
    """

    version_conflict_template = "admin/occupy/version_conflict.html"

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> type[forms.ModelForm[Any]]:
        """Return the model form with the hidden version field."""
        self._form_fields(request, obj, kwargs)
        form = super().get_form(request, obj, change=change, **kwargs)
        return versioned_form(form) if obj is not None else form

    def get_changelist_formset(self, request: HttpRequest, **kwargs: Any) -> Any:
        """Return the ``list_editable`` formset whose rows carry their versions (next to
        their hidden primary key): a row changed since the list was loaded is refused."""
        formset = super().get_changelist_formset(request, **kwargs)
        formset.form = versioned_form(formset.form)
        pk_name = self.model._meta.pk.name

        # A subclass of the formset class Django built for this request: a variable base.
        class VersionedChangelistFormSet(formset):  # type: ignore[misc, valid-type]
            def add_fields(self, form: Any, index: Any) -> None:
                super().add_fields(form, index)
                field = form.fields.get(pk_name)
                if field is not None and field.widget.is_hidden and form.instance.pk is not None:
                    field.widget = _PkWithVersion(form[VERSION_FIELD], field.widget.attrs)

        return VersionedChangelistFormSet

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Refuse a ``list_editable`` save whose rows changed since the list was loaded
        (everything is rolled back) with a message, instead of writing over them."""
        try:
            return super().changelist_view(request, extra_context)
        except VersionConflict as e:
            from django.contrib import messages
            from django.http import HttpResponseRedirect

            text = _(
                "Nothing was saved: %(model)s %(pk)s changed since this list was loaded. "
                "Here is the list as it is now."
            )
            self.message_user(
                request, text % {"model": self.model._meta.verbose_name, "pk": e.pk}, messages.ERROR
            )
            return HttpResponseRedirect(request.get_full_path())

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Save; keep the form for the conflict page if the row moved on."""
        setattr(request, _FORM, form)
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """Save the inlines; keep their forms for the conflict page."""
        setattr(request, _FORMSETS, formsets)
        super().save_related(request, form, formsets, change)

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """Answer a stale save with the conflict page (the save was rolled back)."""
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except VersionConflict as e:
            form = self._conflicting_form(request, e)
            if object_id is None or request.method != "POST" or form is None:
                raise
            return self.version_conflict_response(request, object_id, form)

    def _conflicting_form(self, request: HttpRequest, exc: VersionConflict) -> Any:
        """Return the submitted form whose row ``exc`` refused (main form or inline)."""
        form = getattr(request, _FORM, None)
        for formset in getattr(request, _FORMSETS, ()):
            for inline_form in formset.forms:
                instance = inline_form.instance
                if (
                    exc.model is not None
                    and isinstance(instance, exc.model)
                    and instance.pk is not None
                    and str(instance.pk) == str(exc.pk)
                ):
                    return inline_form
        return form

    def version_conflict_response(
        self, request: HttpRequest, object_id: str, form: Any
    ) -> HttpResponse:
        """Render the conflict page: the refused form's values beside the current ones
        (of the main object, or of the inline row that changed)."""
        obj = self.get_object(request, unquote(object_id))
        current = obj
        if obj is not None and not isinstance(form.instance, type(obj)):
            current = type(form.instance)._base_manager.filter(pk=form.instance.pk).first()
        if obj is None or current is None:
            return self._conflict_page(request, {"title": _("Deleted meanwhile"), "gone": True})
        rows, kept = conflict_rows(form, current)
        change_url = self._object_url(object_id)
        state = getattr(request, STATE, None)
        edit_context = getattr(self, "edit_lease_context", None)
        related = type(current)._meta.verbose_name
        return self._conflict_page(
            request,
            {
                "title": _("%(model)s changed while you edited it")
                % {"model": capfirst(self.model._meta.verbose_name)},
                "object": obj,
                "changed": current,
                "related": None if current is obj else f"{related} “{current}”",
                "rows": rows,
                "resubmit": resubmitted(request, form, kept),
                "version_field": form.add_prefix(VERSION_FIELD),
                "current_version": get_version(current),
                "change_url": change_url,
                "take_current_url": (
                    change_url
                    if state is None
                    else f"{change_url}?{urlencode({TAB_FIELD: state.tab})}"
                ),
                "media": self.media,
                "occupy_edit": (
                    edit_context(request, obj, state)
                    if state is not None and edit_context is not None and state.leases
                    else None
                ),
            },
        )

    def _object_url(self, object_id: str) -> str:
        opts = self.model._meta
        return reverse(
            f"{self.admin_site.name}:{opts.app_label}_{opts.model_name}_change",
            args=[quote(object_id)],
        )

    def _conflict_page(self, request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
        """Answer 409 with the conflict template, ``context`` over the site's own."""
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "rows": [],
            **context,
        }
        return TemplateResponse(request, self.version_conflict_template, context, status=409)
