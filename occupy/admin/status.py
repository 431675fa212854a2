"""``OccupyStatusAdminMixin``: who edits which row, in the changelist, from the same
query that lists the rows (subqueries on the database backend's ``Occupation`` rows:
no query per row, no polling)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.db.models import Case, CharField, OuterRef, Subquery, TextField, Value, When
from django.db.models.functions import Cast, Concat, StrIndex, Substr
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from occupy.backends import get_backend
from occupy.models.keys import pk_text_expression
from occupy.models.pool import live_claims, occupation_filter, occupation_rows

__all__ = ["OccupiedListFilter", "OccupyStatusAdminMixin"]

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = object

_ADMIN_PREFIX = "admin:user:"


def _claims_of_row(queryset: models.QuerySet[Any], alias: str) -> models.QuerySet[Any]:
    """Return the live claims on the outer query's row (``OuterRef("pk")``)."""
    claims = live_claims(queryset.model, occupation_rows(alias, "OccupyStatusAdminMixin"))
    return claims.filter(occupy_object_id=pk_text_expression(queryset.model, outer=True))


def annotate_occupation(queryset: models.QuerySet[Any], alias: str) -> models.QuerySet[Any]:
    """Annotate each row with its live claim: ``occupy_owner``, ``occupy_until`` and,
    for admin tabs' owners (``admin:user:<pk>:tab:…``), ``occupy_username`` and
    ``occupy_full_name``, all in the query that lists the rows."""
    claims = _claims_of_row(queryset, alias)
    user_model = get_user_model()
    start = len(_ADMIN_PREFIX) + 1
    rest = Substr("owner", start)
    # Cast, so that MySQL compares both sides in the connection's collation (the
    # owner column and a cast primary key may have different ones).
    claims = claims.annotate(occupy_user_pk=Cast(Case(
        When(owner__startswith=_ADMIN_PREFIX,
             then=Substr(rest, 1, StrIndex(rest, Value(":")) - 1)),
        default=Value(None), output_field=CharField()), TextField()))
    user = user_model._default_manager.annotate(
        occupy_pk_text=Cast("pk", TextField()),
    ).filter(occupy_pk_text=OuterRef("occupy_user_pk"))
    username = user_model.USERNAME_FIELD
    claims = claims.annotate(
        occupy_username=Subquery(user.values(username)[:1]),
    )
    fields = {f.name for f in user_model._meta.get_fields()}
    if {"first_name", "last_name"} <= fields:
        claims = claims.annotate(occupy_full_name=Subquery(user.annotate(
            occupy_name=Concat("first_name", Value(" "), "last_name",
                               output_field=CharField())).values("occupy_name")[:1]))
    else:
        claims = claims.annotate(occupy_full_name=Value("", output_field=CharField()))
    claims = claims.order_by("fence")
    annotated: models.QuerySet[Any] = queryset.annotate(
        occupy_owner=Subquery(claims.values("owner")[:1]),
        occupy_until=Subquery(claims.values("expires_at")[:1]),
        occupy_username=Subquery(claims.values("occupy_username")[:1]),
        occupy_full_name=Subquery(claims.values("occupy_full_name")[:1]),
    )
    return annotated


class OccupiedListFilter(admin.SimpleListFilter):
    """"Being edited: yes / no", from the same ``EXISTS`` as ``occupied()``, on the
    model admin's ``occupy_status_backend``."""

    title = _("being edited")
    parameter_name = "occupied"

    def __init__(self, request: HttpRequest, params: dict[str, Any],
                 model: type[models.Model], model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        #: The occupy backend alias whose claims count (the column's).
        self.backend: str = getattr(model_admin, "occupy_status_backend", "default")

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """Offer "Yes" (being edited) and "No"."""
        return [("1", _("Yes")), ("0", _("No"))]

    def queryset(self, request: HttpRequest,
                 queryset: models.QuerySet[Any]) -> models.QuerySet[Any]:
        """Keep the rows being edited ("1") or the others ("0")."""
        if self.value() == "1":
            return queryset.filter(occupation_filter(queryset, self.backend))
        if self.value() == "0":
            return queryset.exclude(occupation_filter(queryset, self.backend))
        return queryset


class OccupyStatusAdminMixin(_ModelAdmin):
    """Add a changelist column "being edited by … until …" and a list filter.

    Put ``"occupy_status"`` in ``list_display`` yourself to place it; otherwise it is
    appended. Needs the database backend (``occupy_status_backend``), whose claims it
    reads in the changelist's own query.
    """

    #: The occupy backend alias whose claims are shown (a ``DatabaseBackend``).
    occupy_status_backend: str = "default"

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Add ``occupy.E102``: ``occupy_status_backend`` is no database backend. A
        configured backend that cannot be built is left to occupy's own checks
        (``occupy.E001``-``E006``), which name the setting to fix."""
        from occupy.conf import occupy_settings
        from occupy.exceptions import OccupyError

        errors = super().check(**kwargs)
        alias = self.occupy_status_backend
        try:
            configured = alias in occupy_settings.BACKENDS
            if configured:
                get_backend(alias)
        except (OccupyError, ImproperlyConfigured):
            return errors
        try:
            occupation_rows(alias, type(self).__name__)
        except (OccupyError, ImproperlyConfigured) as e:
            errors.append(checks.Error(
                str(e), hint="Set occupy_status_backend to the alias of a DatabaseBackend: the "
                "column reads its Occupation rows.", obj=type(self), id="occupy.E102"))
        return errors

    def get_queryset(self, request: HttpRequest) -> models.QuerySet[Any]:
        """Annotate each row with its holder (one query for the whole page)."""
        queryset = super().get_queryset(request)
        return annotate_occupation(queryset, self.occupy_status_backend)

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        """Append ``occupy_status`` unless it is placed already."""
        display = list(super().get_list_display(request))
        if "occupy_status" not in display:
            display.append("occupy_status")
        return display

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        """Append the "being edited" filter."""
        filters = list(super().get_list_filter(request))
        if OccupiedListFilter not in filters:
            filters.append(OccupiedListFilter)
        return filters

    @admin.display(description=_("being edited"), ordering="occupy_until")
    def occupy_status(self, obj: Any) -> str:
        """Return "by <user> until HH:MM:SS", or "—" when nobody edits the row."""
        owner = getattr(obj, "occupy_owner", None)
        if owner is None:
            return "—"
        name = (getattr(obj, "occupy_full_name", None) or "").strip() or getattr(
            obj, "occupy_username", None)
        if not owner.startswith(_ADMIN_PREFIX) and not name:
            name = "someone else"
        until = getattr(obj, "occupy_until", None)
        when = "" if until is None else timezone.localtime(until).strftime(" until %H:%M:%S")
        return f"by {name or 'another user'}{when}"
