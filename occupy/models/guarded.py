"""Saves that write only what changed, with an ``UPDATE … WHERE`` guarded by conditions.

:class:`GuardedSaveMixin` is the machinery under :class:`~occupy.models.VersionedMixin`
and :class:`~occupy.models.FencedMixin`. It remembers the values an instance was loaded
with (``from_db`` and ``refresh_from_db``, both public hooks), and its ``save()`` of an
existing row runs ``QuerySet.filter(pk=…, <guards>).update(<changed fields>)``: the
check and the write are one statement, so nothing can change the row in between. No
private Django method is overridden or called for the update.

Subclasses add guards through one hook, :meth:`GuardedSaveMixin.save_guards`, which
returns the alternatives to try in order (each a :class:`Guard`: conditions that must
hold and columns to set). If none matches a row, nothing is written and the error of
the condition that failed is raised.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import models, router, transaction
from django.db.models import Q
from django.db.models.base import ModelBase
from django.db.models.signals import post_save, pre_save

from occupy import telemetry
from occupy.exceptions import ConflictError, VersionConflict
from occupy.models.guards import Check, Guard
from occupy.models.keys import concrete_model, object_key
from occupy.models.tracking import (
    ChangeTrackingMixin,
    concrete_field,
    is_concrete_name,
    is_expression,
)

__all__ = ["Check", "Guard", "GuardedSaveMixin"]


class _Refused(Exception):
    """Raised inside ``atomic`` to roll back a write whose guard matched no row."""


class GuardedSaveMixin(ChangeTrackingMixin):
    """Save existing rows with one guarded ``UPDATE`` of the fields that changed.

    Adds to a model what :class:`~occupy.models.tracking.ChangeTrackingMixin` adds
    (``changed_fields()``), and:

    - ``save()`` of an existing row writes only those fields (or those of
      ``update_fields`` whose value differs from the loaded one), plus ``auto_now``
      fields, in an ``UPDATE`` filtered by the guards of :meth:`save_guards`; when no
      field differs nothing is written (no version bump), and the guards' conditions
      are still checked; a new instance is inserted as usual;
    - ``asave()`` takes the same keyword arguments as ``save()``.

    Instances you build yourself and save with ``update_fields`` (or
    ``force_update``) are guarded with what they carry; fields that were never
    loaded are written without comparison.
    """

    class Meta:
        abstract = True

    # --- saving ----------------------------------------------------------------------
    def save(
        self,
        *,
        force_insert: bool | tuple[ModelBase, ...] = False,
        force_update: bool = False,
        using: str | None = None,
        update_fields: Iterable[str] | None = None,
        **options: Any,
    ) -> None:
        """Insert a new instance, or write the changed fields of an existing row with
        a guarded ``UPDATE``; raise a :class:`~occupy.ConflictError` subclass, having
        written nothing, if the row no longer passes the guards."""
        options = self.clean_save_options(dict(options))
        using = using or router.db_for_write(type(self), instance=self)
        if update_fields is not None:
            update_fields = list(update_fields)
            if not update_fields:
                return
        if self._inserts(force_insert, force_update or update_fields is not None, using):
            self._insert(using, force_insert, force_update, update_fields, options)
            return
        fields = self._fields_to_write(update_fields)
        if not fields and not force_update:
            if update_fields is not None:
                # Nothing differs from what was loaded: no write (no version bump), but
                # the save's preconditions (an expected version, a lease's fence) hold.
                self._confirm(using, self.save_guards([], options))
            return
        # Django's own check that no unsaved object is assigned to a relation (called,
        # not overridden: it raises the same ValueError a plain save() raises). Private,
        # so the stubs leave it out.
        self._prepare_related_fields_for_save(  # type: ignore[attr-defined]
            operation_name="save"
        )
        self._update(using, fields, self.save_guards(fields, options))

    def _inserts(self, force_insert: Any, updating: bool, using: str) -> bool:
        """Return whether this save inserts (a new row, or a copy to another database)."""
        return bool(
            force_insert
            or self.pk is None
            or (self._state.adding and not updating)
            or (not self._state.adding and using != self._state.db)
        )

    def _fields_to_write(self, update_fields: list[str] | None) -> list[models.Field[Any, Any]]:
        """Return the fields an update writes: those changed since the load (of
        ``update_fields``, when given), with the ``auto_now`` ones when any is."""
        if update_fields is not None:
            fields = self._resolve(update_fields)
            changed = set(self._changed())
            return [f for f in fields if f in changed or getattr(f, "auto_now", False)]
        fields = self._changed()
        if fields:
            fields += [
                f
                for f in self._meta.concrete_fields
                if getattr(f, "auto_now", False) and f not in fields
            ]
        return fields

    save.alters_data = True  # type: ignore[attr-defined]  # templates never call it

    async def asave(self, **kwargs: Any) -> None:
        """Async twin of :meth:`save` (with the same options)."""
        await sync_to_async(self.save)(**kwargs)

    asave.alters_data = True  # type: ignore[attr-defined]  # templates never call it

    # --- hooks for subclasses ------------------------------------------------------------
    def clean_save_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Take your extra ``save()`` keyword arguments out of ``options`` (``pop``),
        check them, and add them to the dict the ``super()`` call returns; this base
        refuses whatever is left with ``TypeError``, as ``save()`` would."""
        if options:
            name = next(iter(options))
            raise TypeError(f"save() got an unexpected keyword argument {name!r}.")
        return {}

    def prepare_insert(self, options: dict[str, Any]) -> None:
        """Apply the cleaned ``save()`` options to a row about to be inserted."""

    def save_guards(
        self, fields: list[models.Field[Any, Any]], options: dict[str, Any]
    ) -> list[Guard]:
        """Return the guards to try in order for writing ``fields`` (``options``: the
        cleaned ``save()`` options). The first that matches the row is used; none
        matching refuses the write."""
        return [Guard()]

    def loaded_checks(
        self, fields: Iterable[models.Field[Any, Any]], error: type[ConflictError] = VersionConflict
    ) -> list[Check]:
        """Return a check that each of ``fields`` still holds its loaded value, for
        the fields that were loaded (not ``auto_now`` ones, nor those assigned an
        expression, which are relative to the stored value by design)."""
        loaded = self.__dict__.get("_occupy_loaded", {})
        checks = []
        for f in fields:
            if f.attname not in loaded or getattr(f, "auto_now", False):
                continue
            if is_expression(self.__dict__.get(f.attname)):
                continue
            checks.append(Check(f, "exact", loaded[f.attname], error))
        return checks

    def _insert(
        self,
        using: str,
        force_insert: Any,
        force_update: bool,
        update_fields: list[str] | None,
        options: dict[str, Any],
    ) -> None:
        self.prepare_insert(options)
        if self._state.adding and not (force_insert or force_update or update_fields):
            # An instance built in code that names an existing row's pk would otherwise
            # overwrite that row unguarded (Django tries an UPDATE first): insert only.
            force_insert = True
        super().save(
            force_insert=force_insert,
            force_update=force_update,
            using=using,
            update_fields=update_fields,
        )
        self._remember()

    def _resolve(self, names: list[str]) -> list[models.Field[Any, Any]]:
        managed = self.managed_field_names()
        fields = []
        for name in names:
            if not is_concrete_name(self._meta, name):
                raise ValueError(
                    f"update_fields names {name!r}, which is not a concrete field of "
                    f"{self._meta.object_name}."
                )
            f = concrete_field(self._meta, name)
            if f.primary_key:
                raise ValueError(f"update_fields cannot name the primary key {name!r}.")
            if f.name not in managed and f not in fields and not getattr(f, "generated", False):
                fields.append(f)
        return fields

    def _confirm(self, using: str, guards: list[Guard]) -> None:
        """Check that the stored row passes ``guards`` (their conditions only, nothing
        set), locking it like a write would; raise the refusal's error if it does not."""
        if not guards or not all(g.checks for g in guards):
            return  # an unconditional alternative: nothing to confirm
        for guard in guards:
            if self._write(using, {}, Guard(checks=guard.checks)):
                return
        raise self._refusal(using, [], guards)

    def _update(
        self, using: str, fields: list[models.Field[Any, Any]], guards: list[Guard]
    ) -> None:
        origin = type(self)
        written = [f.name for f in fields]
        for g in guards:
            written += [f.name for f in g.sets if f.name not in written]
        pre_save.send(
            sender=origin, instance=self, raw=False, using=using, update_fields=frozenset(written)
        )
        values = {f: f.pre_save(self, False) for f in fields}
        for guard in guards:
            if self._write(using, values, guard):
                break
        else:
            error = self._refusal(using, fields, guards)
            telemetry.refused(error)
            raise error
        for f, value in guard.sets.items():
            if f not in guard.read_back:
                setattr(self, f.attname, value)
        self._remember([f.attname for f in (*fields, *guard.sets)])
        self._state.db = using
        self._state.adding = False
        post_save.send(
            sender=origin,
            instance=self,
            created=False,
            update_fields=frozenset(written),
            raw=False,
            using=using,
        )

    def _write(self, using: str, values: dict[models.Field[Any, Any], Any], guard: Guard) -> bool:
        """Run the guarded UPDATE, one per table (parents first, like Django), and
        return whether it matched the row; nothing stays written when it did not."""
        tables = _tables(type(self))
        updates: dict[type[models.Model], dict[str, Any]] = {t: {} for t in tables}
        conditions: dict[type[models.Model], list[Q]] = {t: [] for t in tables}
        for f, value in [*values.items(), *guard.sets.items()]:
            updates[_table_of(f)][f.attname] = value
        for check in guard.checks:
            conditions[_table_of(check.field)].append(check.q())
        statements = [
            (
                t._base_manager.using(using).filter(*conditions[t], pk=self._get_pk_val(t._meta)),
                updates[t],
            )
            for t in tables
            if updates[t] or conditions[t]
        ]
        if len(statements) == 1 and not guard.read_back:
            queryset, update = statements[0]
            # Checks without assignments: check and lock the row with a no-op write.
            update = update or {_pk_name(queryset): models.F(_pk_name(queryset))}
            return queryset.update(**update) == 1
        try:
            # A savepoint, so that a refusal inside the caller's transaction leaves it usable.
            with transaction.atomic(using=using):
                for queryset, update in statements:
                    # Checks without assignments: check and lock the row with a no-op write.
                    update = update or {_pk_name(queryset): models.F(_pk_name(queryset))}
                    if queryset.update(**update) != 1:
                        raise _Refused
                for f in guard.read_back:
                    value = (
                        _table_of(f)
                        ._base_manager.using(using)
                        .filter(pk=self._get_pk_val(_table_of(f)._meta))
                        .values_list(f.attname, flat=True)
                        .get()
                    )
                    setattr(self, f.attname, value)
        except _Refused:
            return False
        return True

    def _refusal(
        self, using: str, fields: list[models.Field[Any, Any]], guards: list[Guard]
    ) -> ConflictError:
        """Return the error for a refused write, naming the check that failed (of the
        last, most lenient guard); this reads the row again, on the failure path only."""
        model = type(self)
        label = f"{model._meta.object_name} {self.pk!r}"
        names = tuple(f.name for f in fields)
        key = object_key(model, self.pk)
        guard = guards[-1]
        errors = [check.error for g in guards for check in g.checks]
        error_class = errors[0] if errors else ConflictError
        # The columns the checks compare, or just the pk: whether the row still exists.
        columns = [c.field.attname for c in guard.checks] or ["pk"]
        stored: dict[str, Any] | None = (
            model._base_manager.using(using).filter(pk=self.pk).values(*columns).first()
        )
        if stored is None:
            return error_class(
                f"{label} no longer exists; nothing was written.",
                model=model,
                pk=self.pk,
                fields=names,
                key=key,
            )
        for check in guard.checks:
            now = stored[check.field.attname]
            if not check.holds_for(now):
                if check.lookup == "lte":
                    why = (
                        f"its {check.field.name} is {now}, newer than this writer's "
                        f"{check.value}: a later holder of the lock wrote it"
                    )
                else:
                    why = (
                        f"its {check.field.name} changed since it was loaded "
                        f"({check.value!r}, now {now!r})"
                    )
                return check.error(
                    f"{label} was not saved: {why}; nothing was written.",
                    model=model,
                    pk=self.pk,
                    fields=names,
                    key=key,
                )
        return error_class(
            f"{label} was changed by someone else while it was being saved; nothing was written.",
            model=model,
            pk=self.pk,
            fields=names,
            key=key,
        )


def _table_of(f: models.Field[Any, Any]) -> type[models.Model]:
    return concrete_model(f.model)


def _tables(model: type[models.Model]) -> list[type[models.Model]]:
    """Return the concrete tables of ``model``'s rows, root parent first (Django's
    order, so that guarded and plain saves take row locks in the same order)."""
    concrete = concrete_model(model)
    return [*reversed(concrete._meta.get_parent_list()), concrete]


def _pk_name(queryset: models.QuerySet[Any]) -> str:
    return str(queryset.model._meta.pk.attname)
