"""The :class:`Holder` of a key, as anyone may see it: a value that imports nothing of
occupy, so that the errors (:mod:`occupy.exceptions`) can carry one. It is public as
``occupy.Holder`` and ``occupy.leases.Holder``."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

__all__ = ["Holder"]


class Holder(NamedTuple):
    """Who holds a key, as anyone may see it: never the token.

    ``since`` is when this holder was granted the key (by the store's clock): the
    grant of its token, not its last renewal or re-entry; ``None`` where the store does
    not know it (a value occupy did not write).
    """

    owner: str
    expires_at: datetime
    fence: int
    since: datetime | None = None
