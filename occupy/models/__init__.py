"""occupy's models, and the model-side tools users mix into their own models.

- :class:`VersionedMixin`: optimistic concurrency with a ``version`` column;
- :class:`FencedMixin`: ``save(lease=…)`` refused for a lease older than the row's;
- :class:`OccupiableMixin`: ``book.occupy()``, ``book.holder``;
- :class:`OccupyQuerySetMixin`, :class:`OccupyQuerySet`, :class:`OccupyManager`:
  ``locked()``, ``occupied()``, ``free()``, ``claim()``, ``update_versioned()``.
"""

from occupy.models.fenced import FencedMixin
from occupy.models.guarded import GuardedSaveMixin
from occupy.models.keys import object_key
from occupy.models.occupation import Occupation
from occupy.models.occupiable import OccupiableMixin
from occupy.models.querysets import OccupyManager, OccupyQuerySet, OccupyQuerySetMixin
from occupy.models.versioned import VersionedMixin

__all__ = [
    "FencedMixin",
    "GuardedSaveMixin",
    "Occupation",
    "OccupiableMixin",
    "OccupyManager",
    "OccupyQuerySet",
    "OccupyQuerySetMixin",
    "VersionedMixin",
    "object_key",
]
