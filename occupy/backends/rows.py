"""What a backend shows of its claims outside the lock calls: :class:`Claim` (one row of
``list_locks``) and :class:`OccupationRows` (its claims as ``Occupation`` rows, for
the model side)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from occupy.leases import Lease

if TYPE_CHECKING:
    from django.db.models import Model, QuerySet

__all__ = ["Claim", "OccupationRows"]


@dataclass(frozen=True)
class Claim:
    """One row of ``list_locks``: a live claim on a key, without its token.

    ``state`` is ``"using"`` (granted: it holds the key) or ``"pending"`` (a waiter in
    the key's queue); ``since`` is when it was granted or queued, by the store's clock;
    ``fence`` is the grant's fence, ``None`` for a waiter. A value in the store that
    occupy did not write is listed under the store's own name for it, owned by
    :data:`~occupy.backends.claims.UNKNOWN_OWNER`, with ``since`` and ``fence`` ``None``.
    """

    key: str
    owner: str
    state: str
    since: datetime | None
    expires_at: datetime
    fence: int | None


class OccupationRows:
    """What the model side reads of a backend that keeps its claims as ``Occupation``
    rows (``occupied()``, ``free()``, ``claim()``, the admin's status column).

    A backend offers it through :meth:`BaseBackend.occupation_rows`; one that keeps its
    claims elsewhere returns ``None`` there, and those features say so.
    """

    #: The database alias that holds the ``occupy_occupation`` table.
    database: str

    def live(self, model: type[Model]) -> QuerySet[Any]:
        """Return the live granted claims on rows of ``model`` (the model the lock keys
        name), as ``Occupation`` rows."""
        raise NotImplementedError("subclasses of OccupationRows must provide a live() method")

    def object_id_text(self) -> Any:
        """Return an expression of a claim's ``object_id`` as text that equals
        ``Cast(pk, TextField())`` of its row, in the claims' database."""
        raise NotImplementedError(
            "subclasses of OccupationRows must provide an object_id_text() method"
        )

    def lease(self, claim: Mapping[str, Any], ttl: float) -> Lease:
        """Return the lease a live claim (a ``values()`` row of :meth:`live`) stands for."""
        raise NotImplementedError("subclasses of OccupationRows must provide a lease() method")
