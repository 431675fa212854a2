"""Each dialect decodes its own driver's errors: which may be retried, which say the
database is write-locked, which say a table is missing (no server needed)."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, OperationalError, ProgrammingError

from occupy.backends.db.dialects import (
    MySQLDialect,
    PostgreSQLDialect,
    SQLiteDialect,
    dialect_for,
)


def _pg(sqlstate: str, *, psycopg2: bool = False) -> DatabaseError:
    """Return a Django error raised from a psycopg error with ``sqlstate``."""
    cause = Exception("from the server")
    setattr(cause, "pgcode" if psycopg2 else "sqlstate", sqlstate)
    error = OperationalError("from the server")
    error.__cause__ = cause
    return error


PG, MYSQL, SQLITE = PostgreSQLDialect(), MySQLDialect(), SQLiteDialect()
DEADLOCKS = {
    PG: _pg("40P01"),
    MYSQL: OperationalError(1213, "Deadlock found"),
    SQLITE: OperationalError("database is locked"),
}
MISSING = {
    PG: _pg("42P01"),
    MYSQL: ProgrammingError(1146, "Table 'x.occupy_occupation' doesn't exist"),
    SQLITE: OperationalError("no such table: occupy_occupation"),
}


def test_each_vendor_has_its_dialect() -> None:
    for dialect in (PG, MYSQL, SQLITE):
        assert type(dialect_for(dialect.vendor)) is type(dialect)
    with pytest.raises(NotImplementedError, match="'oracle'"):
        dialect_for("oracle")


@pytest.mark.parametrize("dialect", [PG, MYSQL, SQLITE], ids=lambda d: d.vendor)
def test_a_deadlock_is_transient_and_a_missing_table_is_not(dialect) -> None:
    assert dialect.is_transient(DEADLOCKS[dialect])
    assert not dialect.is_missing_table(DEADLOCKS[dialect])
    assert dialect.is_missing_table(MISSING[dialect])
    assert not dialect.is_transient(MISSING[dialect])
    for other, error in [*DEADLOCKS.items(), *MISSING.items()]:
        if other is not dialect:  # another driver's error means nothing here
            assert not dialect.is_transient(error) and not dialect.is_missing_table(error)
    assert not dialect.is_transient(None) and not dialect.is_missing_table(None)


def test_postgresql_reads_the_sqlstate_of_psycopg2_too() -> None:
    assert PG.is_transient(_pg("40001", psycopg2=True))
    assert PG.is_missing_table(_pg("42P01", psycopg2=True))


def test_only_sqlite_has_one_write_lock_to_be_busy_on() -> None:
    assert SQLITE.is_busy(OperationalError("database is locked"))
    assert SQLITE.is_busy(OperationalError("database table is locked"))
    assert not SQLITE.is_busy(OperationalError("disk I/O error"))
    assert not PG.is_busy(DEADLOCKS[PG]) and not MYSQL.is_busy(DEADLOCKS[MYSQL])
