"""The model side's queryset methods, one mixin per concern, and how to combine them.

Each concern is a queryset mixin with two thin concrete classes, like
django-model-utils':

=========================  ===========================  ==========================
mixin                      methods                      concrete classes
=========================  ===========================  ==========================
``RowLockQuerySetMixin``   ``locked()``                 ``RowLockQuerySet``,
                                                        ``RowLockManager``
``VersionedQuerySetMixin`` ``update_versioned()``       ``VersionedQuerySet``,
                                                        ``VersionedManager``
``OccupiableQuerySetMixin`` ``occupied()``, ``free()``, ``OccupiableQuerySet``,
                           ``claim()``                  ``OccupiableManager``
``OccupyQuerySetMixin``    all of the above             ``OccupyQuerySet``,
                                                        ``OccupyManager``
=========================  ===========================  ==========================

A model mixin installs the manager of what it adds: ``VersionedMixin`` a
``VersionedManager``, ``OccupiableMixin`` an ``OccupiableManager``; ``FencedMixin``
adds no queryset method. A model that combines them, or wants ``locked()`` too,
declares its manager::

    class Book(VersionedMixin, OccupiableMixin, models.Model):
        objects = OccupyManager()

and one with querysets of its own mixes in the concerns it wants::

    class TaskQuerySet(OccupiableQuerySetMixin, RowLockQuerySetMixin, models.QuerySet):
        def open(self): return self.filter(done=False)

    class Task(OccupiableMixin, models.Model):
        objects = TaskQuerySet.as_manager()

A model whose ``objects``, inherited from one occupy mixin, lacks what another of its
occupy mixins adds fails ``manage.py check`` (``occupy.E201``).

:class:`OccupyManager` is each concern's manager too, so it may replace the manager a
mixin installs for type checkers as well (with django-stubs:
``objects: ClassVar[OccupyManager] = OccupyManager()``); a manager for a queryset of
your own is built from the mixin's manager for the same reason
(``OccupiableManager.from_queryset(TaskQuerySet)``).
"""

from __future__ import annotations

from typing import Any

from django.db import models

from occupy.models.occupiable import (
    OccupiableManager,
    OccupiableQuerySet,
    OccupiableQuerySetMixin,
)
from occupy.models.rowlocks import RowLockManager, RowLockQuerySet, RowLockQuerySetMixin
from occupy.models.versioned import VersionedManager, VersionedQuerySet, VersionedQuerySetMixin

__all__ = [
    "OccupiableManager",
    "OccupiableQuerySet",
    "OccupiableQuerySetMixin",
    "OccupyManager",
    "OccupyQuerySet",
    "OccupyQuerySetMixin",
    "RowLockManager",
    "RowLockQuerySet",
    "RowLockQuerySetMixin",
    "VersionedManager",
    "VersionedQuerySet",
    "VersionedQuerySetMixin",
]


class OccupyQuerySetMixin(RowLockQuerySetMixin, VersionedQuerySetMixin,
                          OccupiableQuerySetMixin):
    """Every occupy queryset method: ``locked()``, ``update_versioned()``,
    ``occupied()``, ``free()`` and ``claim()``; mix into a ``QuerySet`` subclass."""


class OccupyQuerySet(OccupyQuerySetMixin, models.QuerySet[Any]):
    """A ``QuerySet`` with :class:`OccupyQuerySetMixin`."""


_OccupyManagerBase = models.Manager.from_queryset(OccupyQuerySet)


class OccupyManager(_OccupyManagerBase[Any], RowLockManager, VersionedManager,
                    OccupiableManager):
    """A manager with every occupy queryset method: the one to declare on a model that
    combines ``VersionedMixin`` and ``OccupiableMixin``. It is each concern's manager
    too (an ``OccupyManager`` is a ``VersionedManager``), so it may replace the one a
    model mixin installs, for type checkers as well."""
