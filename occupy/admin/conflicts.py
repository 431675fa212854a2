"""The admin's version conflict page: what a refused form sent beside what the row holds
now, and the form that saves the user's changes on the current version.

Invariant: only the fields the user changed (by the signed snapshot of the values the
form was rendered with) are theirs to keep; every other field is resubmitted with the
value someone else saved meanwhile. See docs/topics/admin.md.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import FieldDoesNotExist
from django.http import HttpRequest

from occupy.admin.fields import LEASE_FIELD, TAB_FIELD

__all__ = ["RENDERED_FIELD", "VERSION_FIELD", "conflict_rows", "display", "resubmitted"]

#: The name of the hidden form field carrying the version.
VERSION_FIELD = "occupy_version"
#: The hidden field carrying the signed values the form was rendered with.
RENDERED_FIELD = "occupy_rendered"

#: POST members never copied into the "keep mine" form.
_NOT_RESUBMITTED = {
    "csrfmiddlewaretoken",
    VERSION_FIELD,
    RENDERED_FIELD,
    LEASE_FIELD,
    TAB_FIELD,
    "_save",
    "_continue",
    "_addanother",
    "_saveasnew",
}


def _post_values(value: Any) -> list[str]:
    """Return a form value as the POST members a browser would send for it."""
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    if value is None or value is False:
        return []
    if value is True:
        return ["on"]
    return [str(value)]


def conflict_rows(form: Any, current: Any) -> tuple[list[dict[str, str]], dict[str, list[str]]]:
    """Return the rows of the conflict page (each field the user changed whose value
    differs from the current one: label, name, mine, theirs) and the POST values of
    the fields the user left alone (the current ones, to resubmit)."""
    fresh = type(form)(instance=current)
    users = form.changed_by_user() if hasattr(form, "changed_by_user") else None
    rows = []
    kept: dict[str, list[str]] = {}
    for name, field in form.fields.items():
        if (
            name in (VERSION_FIELD, RENDERED_FIELD)
            or name not in form.cleaned_data
            or name not in fresh.fields
        ):  # the formset's own id, DELETE, parent
            continue
        theirs = fresh[name].initial
        if users is not None and name not in users:
            if not isinstance(field.widget, forms.MultiWidget):
                kept[form.add_prefix(name)] = _post_values(fresh[name].value())
            continue
        if not field.has_changed(theirs, form[name].data):
            continue
        rows.append(
            {
                "label": form[name].label,
                "name": name,
                "mine": display(current, name, form.cleaned_data[name]),
                "theirs": display(current, name, getattr(current, name, theirs)),
            }
        )
    return rows, kept


def resubmitted(
    request: HttpRequest, form: Any, kept: dict[str, list[str]]
) -> list[tuple[str, str]]:
    """Return the POST members of the "keep mine" form: what the user sent, with the
    current values of the fields they left alone, and the main form's version."""
    version_key = form.add_prefix(VERSION_FIELD)
    skipped = {version_key, form.add_prefix(RENDERED_FIELD), *kept}
    members = [
        (key, value)
        for key, values in request.POST.lists()
        if key not in _NOT_RESUBMITTED and key not in skipped
        for value in values
    ]
    members += [(key, value) for key, values in kept.items() for value in values]
    if version_key != VERSION_FIELD:  # an inline row: the main form's version stands
        members += [(VERSION_FIELD, value) for value in request.POST.getlist(VERSION_FIELD)]
    return members


def display(obj: Any, name: str, value: Any) -> str:
    """Return ``value`` of field ``name`` as a user reads it (choices by their label)."""
    try:
        field = obj._meta.get_field(name)
    except FieldDoesNotExist:
        return "" if value is None else str(value)
    if field.flatchoices:
        return str(dict(field.flatchoices).get(value, value))
    return "" if value is None else str(value)
