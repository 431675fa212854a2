"""The database backend's SQL and vendor behaviour, one :class:`Dialect` per vendor.

:func:`dialect_for` is the one place a vendor is named: everything else asks the
dialect it returns.
"""

from __future__ import annotations

from occupy.backends.db.dialects.base import TABLE, Dialect
from occupy.backends.db.dialects.mysql import MySQLDialect
from occupy.backends.db.dialects.postgresql import PostgreSQLDialect
from occupy.backends.db.dialects.sqlite import SQLiteDialect

__all__ = ["TABLE", "Dialect", "MySQLDialect", "PostgreSQLDialect", "SQLiteDialect", "dialect_for"]

#: The dialect of each Django ``connection.vendor`` occupy supports (MariaDB's is "mysql").
DIALECTS: dict[str, Dialect] = {
    dialect.vendor: dialect for dialect in (PostgreSQLDialect(), MySQLDialect(), SQLiteDialect())
}


def dialect_for(vendor: str) -> Dialect:
    """Return the dialect for a Django ``connection.vendor``."""
    try:
        return DIALECTS[vendor]
    except KeyError:
        raise NotImplementedError(
            f"occupy's DatabaseBackend supports PostgreSQL, MySQL/MariaDB and SQLite, "
            f"not {vendor!r}."
        ) from None
