"""What a dialect says about keys held for the caller's own transaction
(:mod:`occupy.backends.db.transaction`): whether it can, the *grant guard* every lease
grant then starts with, and the statements of a transaction lock. Only the PostgreSQL
dialect has them; elsewhere a key is never held for a transaction.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["TransactionLocks"]


class TransactionLocks:
    """The transaction-lock part of a :class:`~occupy.backends.db.dialects.Dialect`."""

    #: Where the key can be held for the caller's own transaction
    #: (:mod:`occupy.backends.db.transaction`): every grant statement then takes the
    #: key's transaction lock first, for its own short transaction (the *grant guard*:
    #: a ``WITH occupy_guard`` the statements start with, joined by the words below),
    #: and its parameters start with :meth:`guard_params`.
    holds_for_transaction: ClassVar[bool] = False
    #: The grant guard's ``WITH`` clause, its table in an ``INSERT … SELECT``'s
    #: ``FROM`` list, in an ``UPDATE``'s ``FROM`` clause, and as the whole ``FROM`` of a
    #: ``SELECT`` of constants.
    guard_with: ClassVar[str] = ""
    guard_join: ClassVar[str] = ""
    guard_update: ClassVar[str] = ""
    guard_from: ClassVar[str] = ""

    def guard_params(self, key: str, left: float | None) -> list[Any]:
        """Return the parameters of the grant guard, which every grant statement's
        parameters start with: none where the dialect has no transaction locks. ``left``
        bounds the guard's wait for a transaction that holds the key (``None``: none)."""
        return []

    def is_guard_timeout(self, error: BaseException | None) -> bool:
        """Return whether a grant statement failed because the grant guard waited out
        its time for a transaction that holds the key (the grant did nothing)."""
        return False

    # Transaction locks: what occupy.backends.db.transaction runs where
    # holds_for_transaction (see the PostgreSQL dialect, the only one that has them).
    def tx_savepoint(self) -> str:
        """Return the name of the savepoint a transaction lock is taken in."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")

    def tx_id(self, key: str) -> int:
        """Return the id of ``key``'s transaction lock."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")

    def tx_bound(self, seconds: float | None) -> str:
        """Return ``seconds`` as the bound of a transaction lock's wait."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")

    def tx_try(self) -> str:
        """Return the statement that takes a transaction lock at once or raises."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")

    def tx_hold(self) -> str:
        """Return the statement that holds a free key at once and says why not."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")

    def tx_has_hold(self) -> str:
        """Return the statement that says whether :meth:`tx_hold`'s function exists."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")

    def tx_wait(self) -> str:
        """Return the statements that wait for a transaction lock up to a bound."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")

    def tx_no_lease(self) -> str:
        """Return the statement that raises if a live lease holds the key."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")

    def tx_own_lease(self) -> str:
        """Return the statement that raises unless the caller's lease holds the key."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")

    def tx_refusal(self, error: BaseException) -> str | None:
        """Return why a transaction lock's statement failed, or ``None``."""
        raise NotImplementedError(f"{type(self).__name__} has no transaction locks")
