"""The warnings by which occupy announces a removal, named for the release that makes
it, as Django's ``django.utils.deprecation`` names its own.

Nothing is deprecated yet. A name to be removed in 0.2 warns with
:class:`RemovedInOccupy02Warning` (``warnings.warn(..., RemovedInOccupy02Warning,
stacklevel=2)``) for the releases between, and the release notes list it; a removal
further off starts as a ``PendingDeprecationWarning`` subclass named for its release,
becoming a ``DeprecationWarning`` one release before it. A project finds what it must
change with ``python -W error::DeprecationWarning`` (or pytest's ``filterwarnings``),
and can silence exactly occupy's warnings by class.
"""

from __future__ import annotations

__all__ = ["RemovedInNextVersionWarning", "RemovedInOccupy02Warning"]


class RemovedInOccupy02Warning(DeprecationWarning):
    """What occupy 0.2 removes: shown by default in ``__main__`` and in tests, as
    Python shows every ``DeprecationWarning``."""


#: The warning of the next release's removals, whichever release that is.
RemovedInNextVersionWarning = RemovedInOccupy02Warning
