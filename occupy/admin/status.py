"""``OccupyStatusAdminMixin``: who edits which row, in the changelist. On the database
backend from the same query that lists the rows (subqueries on its ``Occupation`` rows:
no query per row, no polling); on any other backend from the store, one holder read per
row on the page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import models, router
from django.db.models import Case, CharField, OuterRef, Subquery, TextField, Value, When
from django.db.models.functions import Cast, Concat, StrIndex, Substr
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

import occupy
from occupy.admin.history import OccupyHistoryAdminMixin
from occupy.admin.sentences import unavailable_text
from occupy.admin.stores import AdminBackendMixin
from occupy.backends import get_backend
from occupy.checks import alias_problem
from occupy.exceptions import Misconfigured, StoreUnavailable
from occupy.models import object_key
from occupy.models.keys import pk_text_expression
from occupy.models.pool import live_claims, occupation_filter, occupation_rows
from occupy.models.stores import model_backend
from occupy.owners import owner_user_pk

__all__ = ["OccupiedListFilter", "OccupyStatusAdminMixin"]

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
    claims = claims.annotate(
        occupy_user_pk=Cast(
            Case(
                When(
                    owner__startswith=_ADMIN_PREFIX,
                    then=Substr(rest, 1, StrIndex(rest, Value(":")) - 1),
                ),
                default=Value(None),
                output_field=CharField(),
            ),
            TextField(),
        )
    )
    user = user_model._default_manager.annotate(
        occupy_pk_text=Cast("pk", TextField()),
    ).filter(occupy_pk_text=OuterRef("occupy_user_pk"))
    username = user_model.USERNAME_FIELD
    claims = claims.annotate(
        occupy_username=Subquery(user.values(username)[:1]),
    )
    fields = {f.name for f in user_model._meta.get_fields()}
    if {"first_name", "last_name"} <= fields:
        claims = claims.annotate(
            occupy_full_name=Subquery(
                user.annotate(
                    occupy_name=Concat(
                        "first_name", Value(" "), "last_name", output_field=CharField()
                    )
                ).values("occupy_name")[:1]
            )
        )
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


def holders_of_page(rows: Any, alias: str, key_of: Any = None) -> None:
    """Set ``occupy_owner``, ``occupy_until``, ``occupy_username`` and
    ``occupy_full_name`` on each of ``rows`` (the page's objects), as
    :func:`annotate_occupation` does in SQL, from the holders backend ``alias`` reports
    (``key_of(obj)``: an object's key, default ``app.model:pk``)."""
    objects = list(rows)  # evaluates (and caches) the page's query
    holders = {}
    for obj in objects:
        key = key_of(obj) if key_of is not None else object_key(type(obj), obj.pk)
        holders[obj.pk] = occupy.holder(key, backend=alias)
    pks = {
        owner_user_pk(h.owner)
        for h in holders.values()
        if h is not None and h.owner.startswith(_ADMIN_PREFIX)
    }
    user_model = get_user_model()
    users = (
        {
            str(u.pk): u
            for u in user_model._default_manager.filter(pk__in=[pk for pk in pks if pk is not None])
        }
        if pks
        else {}
    )
    for obj in objects:
        found = holders[obj.pk]
        user = None if found is None else users.get(owner_user_pk(found.owner) or "")
        obj.occupy_owner = None if found is None else found.owner
        obj.occupy_until = None if found is None else found.expires_at
        obj.occupy_username = None if user is None else user.get_username()
        obj.occupy_full_name = None if user is None else user.get_full_name()


class OccupiedListFilter(admin.SimpleListFilter):
    """ "Being edited: yes / no", from the same ``EXISTS`` as ``occupied()``, on the
    model admin's ``occupy_backend``."""

    title = _("being edited")
    parameter_name = "occupied"

    def __init__(
        self,
        request: HttpRequest,
        params: dict[str, Any],
        model: type[models.Model],
        model_admin: Any,
    ) -> None:
        super().__init__(request, params, model, model_admin)
        #: The occupy backend alias whose claims count (the column's).
        status_backend = getattr(model_admin, "_status_backend", None)
        self.backend: str = status_backend() if status_backend else "default"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        """Offer "Yes" (being edited) and "No"."""
        return [("1", _("Yes")), ("0", _("No"))]

    def queryset(
        self, request: HttpRequest, queryset: models.QuerySet[Any]
    ) -> models.QuerySet[Any]:
        """Keep the rows being edited ("1") or the others ("0")."""
        if self.value() == "1":
            return queryset.filter(occupation_filter(queryset, self.backend))
        if self.value() == "0":
            return queryset.exclude(occupation_filter(queryset, self.backend))
        return queryset


class OccupyStatusAdminMixin(OccupyHistoryAdminMixin, AdminBackendMixin):
    """Add a changelist column "being edited by … until …" and a list filter.

    Put ``"occupy_status"`` in ``list_display`` yourself to place it; otherwise it is
    appended. The claims are those of ``occupy_backend``: by default the model's
    (the store ``obj.occupy()`` locks it in), the alias every occupy mixin of the admin
    uses, so the edit leases' too. On a database backend in the model's database, the
    column and the "being edited" filter come from the changelist's own query; on any
    other backend the column asks the store for the holder of each row on the page, and
    the filter is not offered (the check ``occupy.W102`` says so).
    """

    def _status_backend(self) -> str:
        return self.get_occupy_backend()

    def _status_in_query(self) -> bool:
        """Return whether the backend's claims can be read in the changelist's query:
        they are rows of the database the model is read from (not when the alias is
        misconfigured: the changelist then says the admin's lock settings are wrong)."""
        try:
            alias = self._status_backend()
        except Misconfigured:
            return False
        rows = get_backend(alias).occupation_rows()
        return rows is not None and rows.database == router.db_for_read(self.model)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Add ``occupy.W102``: the backend keeps its claims outside the database, so
        the column asks the store row by row and the filter is not offered. An alias
        that is not configured is ``occupy.E102``
        (:class:`~occupy.admin.stores.AdminBackendMixin`); a configured backend that
        cannot be built is left to occupy's own checks (``occupy.E001``-``E006``),
        which name the setting to fix."""
        from occupy.exceptions import OccupyError

        errors = super().check(**kwargs)
        alias = model_backend(self.model, self.occupy_backend)
        if alias_problem(self, "occupy_backend", alias) is not None:
            return errors  # E102 (the admin's alias) or E203 (the model's) says it
        try:
            if self._status_in_query():
                return errors
        except (OccupyError, ImproperlyConfigured):
            return errors
        errors.append(
            checks.Warning(
                f"{type(self).__name__} shows the claims of the occupy backend {alias!r}, "
                "which keeps them outside the model's database: the 'being edited' column asks the "
                "store for each row on the page, and the 'being edited' filter is not offered.",
                hint="Use a DatabaseBackend on the model's database for occupy_backend "
                "to have both from the changelist's own query.",
                obj=type(self),
                id="occupy.W102",
            )
        )
        return errors

    def get_queryset(self, request: HttpRequest) -> models.QuerySet[Any]:
        """Annotate each row with its holder (one query for the whole page), on a
        database backend."""
        queryset = super().get_queryset(request)
        if not self._status_in_query():
            return queryset
        return annotate_occupation(queryset, self._status_backend())

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """On a backend outside the database, give each row on the page its holder,
        read from the store (one call per row, the users in one query)."""
        changelist = super().get_changelist_instance(request)
        if not self._status_in_query():
            try:
                holders_of_page(
                    changelist.result_list,
                    self._status_backend(),
                    getattr(self, "get_occupy_key", None),
                )
            except StoreUnavailable as e:
                from django.contrib import messages

                self.message_user(request, unavailable_text(e, "list"), messages.WARNING)
        return changelist

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        """Append ``occupy_status`` unless it is placed already."""
        display = list(super().get_list_display(request))
        if "occupy_status" not in display:
            display.append("occupy_status")
        return display

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        """Append the "being edited" filter (on a database backend)."""
        filters = list(super().get_list_filter(request))
        if OccupiedListFilter not in filters and self._status_in_query():
            filters.append(OccupiedListFilter)
        return filters

    @admin.display(description=_("being edited"), ordering="occupy_until")
    def occupy_status(self, obj: Any) -> str:
        """Return "by <user> until HH:MM:SS", or "—" when nobody edits the row."""
        owner = getattr(obj, "occupy_owner", None)
        if owner is None:
            return "—"
        name = (getattr(obj, "occupy_full_name", None) or "").strip() or getattr(
            obj, "occupy_username", None
        )
        if not owner.startswith(_ADMIN_PREFIX) and not name:
            name = gettext("someone else")
        name = name or gettext("another user")
        until = getattr(obj, "occupy_until", None)
        if until is None:
            return gettext("by %(holder)s") % {"holder": name}
        until_text = timezone.localtime(until).strftime("%H:%M:%S")
        return gettext("by %(holder)s until %(until)s") % {"holder": name, "until": until_text}
