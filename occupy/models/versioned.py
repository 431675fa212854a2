"""``VersionedMixin``: optimistic concurrency with a version column (``version``, or
the field ``version_field_name`` names), and its two policies, ``"fields"`` (the
default: a save conflicts only when someone else changed a field it writes) and
``"strict"`` (it conflicts on any change since the load). Why and when to use each:
docs/topics/models.md.

Invariants: the check and the write are one guarded ``UPDATE`` (nothing can change
the row in between); every write bumps the version, so a version (an ``ETag``) always
tells whether the row changed; a version the caller supplied (``expect_version()``,
``If-Match``, a form's hidden field) is compared strictly whatever the policy.
"""

from __future__ import annotations

from typing import Any, ClassVar

from asgiref.sync import sync_to_async
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import models, router, transaction
from django.db.models import F
from django.utils.translation import gettext_lazy as _

from occupy import telemetry
from occupy.exceptions import VersionConflict
from occupy.models.guarded import Check, Guard, GuardedSaveMixin
from occupy.models.keys import object_key
from occupy.models.managers import check_objects_manager
from occupy.models.querysets import OccupyManager, VersionedQuerySetMixin
from occupy.models.tracking import concrete_field
from occupy.versions import DEFAULT_VERSION_FIELD, get_version, get_version_field

__all__ = ["VersionedMixin"]

POLICIES = ("fields", "strict")
#: Stands for "the version was never loaded" (an instance built by hand).
_UNLOADED = object()
#: The internal types an ``occupy.E202`` check accepts for a version field.
_INTEGER_FIELDS = frozenset(
    [
        "IntegerField",
        "BigIntegerField",
        "SmallIntegerField",
        "PositiveIntegerField",
        "PositiveBigIntegerField",
        "PositiveSmallIntegerField",
    ]
)


def _check_policy(owner: str, policy: Any) -> str:
    if policy not in POLICIES:
        raise ImproperlyConfigured(
            f"{owner} version_policy must be one of {POLICIES}, not {policy!r}."
        )
    return str(policy)


def _inherits_the_version_column(cls: type) -> bool:
    """Whether ``cls`` would get ``VersionedMixin``'s own ``version`` column: no class
    between them in the MRO redefines ``version`` (a field of the user's, or ``None``)."""
    return next(c for c in cls.__mro__[1:] if "version" in c.__dict__) is VersionedMixin


class VersionedMixin(GuardedSaveMixin):
    """Refuse lost updates with an integer ``version`` column.

    Adds to a model:

    - ``version``: 1 on insert, one more on every save (to name it otherwise, declare
      your own integer field and name it in ``version_field_name``: the mixin's
      ``version`` is then left out);
    - ``save()`` writes only the changed fields in one ``UPDATE … WHERE pk = … AND
      <guard>`` and raises :class:`~occupy.VersionConflict` (writing nothing) when
      the guard fails: with ``version_policy = "fields"`` (default) the changed
      fields' loaded values, with ``"strict"`` the loaded version;
    - ``delete()``: refused with :class:`~occupy.VersionConflict` when the row's
      version moved on (guarded in the same transaction as the delete);
    - ``objects``: the :class:`~occupy.models.OccupyManager`, which every occupy model
      mixin installs; its ``update_versioned()`` is the guarded form of
      ``QuerySet.update()`` (see :mod:`occupy.models.querysets` for querysets of your
      own).

    ``QuerySet.update()`` and ``bulk_update()`` bypass all this: they neither check
    nor bump the version.
    """

    STRICT: ClassVar[str] = "strict"
    FIELDS: ClassVar[str] = "fields"

    version = models.PositiveIntegerField(_("version"), default=1, editable=False)

    #: The name of the version field. Another name than ``"version"`` names an integer
    #: field the model declares itself (``revision = models.PositiveIntegerField(
    #: default=1, editable=False)``), as django-concurrency's users name theirs; every
    #: part of occupy (saves, querysets, the admin, DRF's ``ETag``) reads that one.
    version_field_name: ClassVar[str] = DEFAULT_VERSION_FIELD

    #: ``"fields"``: conflict only when the fields a save writes were changed by
    #: someone else; ``"strict"``: conflict on any change since the row was loaded.
    version_policy: ClassVar[str] = "fields"

    objects = OccupyManager()

    class Meta:
        abstract = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _check_policy(cls.__qualname__, cls.__dict__.get("version_policy", "fields"))
        if cls.version_field_name != DEFAULT_VERSION_FIELD and _inherits_the_version_column(cls):
            # Django's way to leave out a field of an abstract parent: the model's own
            # version field replaces the mixin's.
            cls.version = None  # type: ignore[assignment]

    @classmethod
    def check(cls, **kwargs: Any) -> list[checks.CheckMessage]:
        """Add ``occupy.E201``: the model's own ``objects`` has no
        ``update_versioned()``; ``occupy.E202``: ``version_field_name`` names no
        integer field of the model."""
        return [
            *super().check(**kwargs),
            *cls._check_version_field(),
            *check_objects_manager(
                cls, VersionedMixin, VersionedQuerySetMixin, "update_versioned()"
            ),
        ]

    @classmethod
    def _check_version_field(cls) -> list[checks.CheckMessage]:
        if cls._meta.abstract:
            return []
        field = get_version_field(cls)
        if field is not None and field.get_internal_type() in _INTEGER_FIELDS:
            return []
        name = cls.version_field_name
        found = "no such field" if field is None else f"a {type(field).__name__}"
        return [
            checks.Error(
                f"{cls._meta.object_name}.version_field_name is {name!r}, but the model has "
                f"{found}: the version must be an integer field.",
                hint=f"Declare {name} = models.PositiveIntegerField(default=1, "
                "editable=False) on the model, or name the field you declared.",
                obj=cls,
                id="occupy.E202",
            )
        ]

    def expect_version(self, version: int) -> None:
        """Make the next ``save()`` or ``delete()`` conditional on the row being at
        ``version`` (a client's ``If-Match``, a form's hidden field): compared strictly
        whatever the policy, also when it is the version that was loaded."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version must be an int, not {type(version).__name__} ({version!r}).")
        setattr(self, self._version_field().attname, version)
        self.__dict__["_occupy_expected"] = True

    @property
    def expected_version(self) -> int | None:
        """Return the version :meth:`expect_version` set for the next write, or ``None``."""
        return get_version(self) if self.__dict__.get("_occupy_expected") else None

    def _version_field(self) -> models.Field[Any, Any]:
        return concrete_field(self._meta, self.version_field_name)

    def delete(
        self, using: str | None = None, keep_parents: bool = False
    ) -> tuple[int, dict[str, int]]:
        """Delete the row only if its version is still the one this instance carries
        (loaded, or supplied by the caller as a precondition); else raise
        :class:`~occupy.VersionConflict`, having deleted nothing.

        The version is checked by a guarded no-op ``UPDATE`` that also locks the row,
        and Django's own delete (cascades, signals) runs in the same transaction, so
        nobody can change the row in between.
        """
        self.__dict__.pop("_occupy_expected", None)  # a delete always compares strictly
        name = self._version_field().attname
        version = self.__dict__.get(name)
        if version is None or self.pk is None:
            return super().delete(using=using, keep_parents=keep_parents)
        using = using or router.db_for_write(type(self), instance=self)
        rows = type(self)._base_manager.using(using).filter(pk=self.pk)
        with transaction.atomic(using=using):
            if rows.filter(**{name: version}).update(**{name: F(name)}) != 1:
                current = rows.values_list(name, flat=True).first()
                label = f"{self._meta.object_name} {self.pk!r}"
                why = (
                    "no longer exists"
                    if current is None
                    else f"changed since it was loaded (version {version}, now {current})"
                )
                error = VersionConflict(
                    f"{label} was not deleted: it {why}.",
                    model=type(self),
                    pk=self.pk,
                    key=object_key(type(self), self.pk),
                )
                telemetry.refused(error)
                raise error
            return super().delete(using=using, keep_parents=keep_parents)

    delete.alters_data = True  # type: ignore[attr-defined]  # templates never call it

    async def adelete(
        self, using: str | None = None, keep_parents: bool = False
    ) -> tuple[int, dict[str, int]]:
        """Async twin of :meth:`delete`."""
        return await sync_to_async(self.delete)(using=using, keep_parents=keep_parents)

    adelete.alters_data = True  # type: ignore[attr-defined]  # templates never call it

    def managed_field_names(self) -> set[str]:
        """Add the version field, which only the guard writes."""
        return super().managed_field_names() | {self.version_field_name}

    def clean_save_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Take ``version_policy=`` (this save's policy, default the model's)."""
        policy = options.pop("version_policy", None)
        cleaned = super().clean_save_options(options)
        cleaned["version_policy"] = (
            self.version_policy if policy is None else _check_policy("save()", policy)
        )
        return cleaned

    def save_guards(
        self, fields: list[models.Field[Any, Any]], options: dict[str, Any]
    ) -> list[Guard]:
        """Guard the write with the loaded version (``"strict"``), or with the written
        fields' loaded values (``"fields"``: the version is tried first, one statement
        when nobody else wrote; if it moved, the fields are compared instead and the
        new version is read back).

        A version the caller supplied (an instance built by hand, or a version assigned
        after the load: a form's hidden field, an ``If-Match``) is a precondition: it is
        compared strictly whatever the policy, because the caller's values were
        computed from that version of the row, not from what ``save()`` loaded.
        """
        policy = options["version_policy"]
        guards = super().save_guards(fields, options)
        version = self._version_field()
        expected = self.__dict__.get(version.attname)
        loaded = self.__dict__.get("_occupy_loaded", {})
        if expected is not None and (
            self.__dict__.pop("_occupy_expected", False)
            or loaded.get(version.attname, _UNLOADED) != expected
        ):
            policy = self.STRICT
        if expected is None and policy == self.STRICT:
            raise ValueError(
                f"{self._meta.object_name} {self.pk!r} was loaded without its version "
                "(defer() or only()), so a strict save cannot be checked; load it with "
                f"{version.name!r}."
            )
        if expected is not None and (isinstance(expected, bool) or not isinstance(expected, int)):
            raise TypeError(
                f"version must be an int, not {type(expected).__name__} ({expected!r})."
            )
        same_fields = self.loaded_checks(fields, VersionConflict) if policy == self.FIELDS else []
        out = []
        for guard in guards:
            if expected is not None:
                # The loaded version still there proves no versioned save wrote since the
                # load, whatever it changed: the fields need comparing only once it moved.
                out.append(
                    guard.extended(
                        checks=[Check(version, "exact", expected, VersionConflict)],
                        sets={version: expected + 1},
                    )
                )
            if policy == self.FIELDS:
                out.append(
                    guard.extended(
                        checks=same_fields,
                        sets={version: F(version.attname) + 1},
                        read_back=[version],
                    )
                )
        return out
