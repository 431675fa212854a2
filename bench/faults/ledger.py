"""The ledger: the counter the soak's sections increment, and the record of every section,
in a SQLite file of the run that no fault touches.

One ledger per store. The counter of each key is a row ``(value, fence, accepted)``.
A section, holding a lease with fence ``f``:

1. **reads with its fence**: ``UPDATE record SET fence = f WHERE fence <= f RETURNING
   value``, the read of a read-modify-write under a fence (the store learns the fence
   before the value is used; a plain read then a fenced write would let an older holder
   that writes first lose the newer one's increment, and no lock store could prevent
   it);
2. **writes with its fence**: ``UPDATE record SET value = <read> + 1, accepted =
   accepted + 1 WHERE fence <= f``. ``accepted`` is the independent count of accepted
   writes (an atomic increment, whatever the interleaving), so ``accepted - value`` is
   the number of increments lost.

Each step runs in one ``BEGIN IMMEDIATE`` transaction that also takes the next number of
the ledger's sequence (``clock``) and records the step in ``sections``: a total order of
every read and write, which is what overlaps are judged on (no wall clock). A worker
killed in a step leaves nothing half-written (SQLite rolls the transaction back).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Ledger", "Read", "SectionRow"]

SCHEMA = """
PRAGMA journal_mode = WAL;
CREATE TABLE IF NOT EXISTS clock (n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS record (
    key TEXT PRIMARY KEY, value INTEGER NOT NULL, fence INTEGER NOT NULL,
    accepted INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sections (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL, worker INTEGER NOT NULL,
    fence INTEGER NOT NULL,
    t_call REAL NOT NULL,      -- time.monotonic() before acquire was called
    t_grant REAL NOT NULL,     -- ... and when it returned the lease
    after_seq INTEGER NOT NULL,  -- the worker's last ledger step before acquire
    read_seq INTEGER NOT NULL, read_ok INTEGER NOT NULL, paused INTEGER NOT NULL,
    write_seq INTEGER, write_ok INTEGER, t_write REAL);
CREATE TABLE IF NOT EXISTS outcomes (
    worker INTEGER NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (worker, kind, detail));
"""


@dataclass(frozen=True)
class Read:
    """What a section's fenced read found."""

    section: int
    seq: int
    ok: bool
    value: int


@dataclass(frozen=True)
class SectionRow:
    """One section as the ledger recorded it (see the ``sections`` table)."""

    id: int
    key: str
    worker: int
    fence: int
    t_call: float
    t_grant: float
    after_seq: int
    read_seq: int
    read_ok: bool
    paused: bool
    write_seq: int | None
    write_ok: bool | None
    t_write: float | None


class Ledger:
    """One process's connection to a store's ledger file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Autocommit (isolation_level None): the transactions are written out below.
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.db.execute("PRAGMA synchronous = OFF")

    @classmethod
    def create(cls, path: Path, keys: list[str]) -> Ledger:
        """Create the ledger with a zero counter for each of ``keys``."""
        ledger = cls(path)
        ledger.db.executescript(SCHEMA)
        ledger.db.execute("INSERT INTO clock VALUES (0)")
        ledger.db.executemany("INSERT INTO record VALUES (?, 0, 0, 0)", [(k,) for k in keys])
        return ledger

    def close(self) -> None:
        """Close the connection."""
        self.db.close()

    def _tick(self) -> int:
        (n,) = self.db.execute("UPDATE clock SET n = n + 1 RETURNING n").fetchone()
        return int(n)

    def now(self) -> int:
        """Return the ledger's sequence number now."""
        (n,) = self.db.execute("SELECT n FROM clock").fetchone()
        return int(n)

    def read(
        self, key: str, fence: int, *, worker: int, t_call: float, t_grant: float, after_seq: int
    ) -> Read:
        """Read ``key``'s counter with ``fence`` (raising the record's fence to it), or be
        refused when the record already carries a higher fence; record the section."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            seq = self._tick()
            row = self.db.execute(
                "UPDATE record SET fence = ? WHERE key = ? AND fence <= ? RETURNING value",
                (fence, key, fence),
            ).fetchone()
            cursor = self.db.execute(
                "INSERT INTO sections (key, worker, fence, t_call, t_grant, after_seq, "
                "read_seq, read_ok, paused) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)",
                (key, worker, fence, t_call, t_grant, after_seq, seq, row is not None),
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        section = cursor.lastrowid
        assert section is not None
        return Read(section, seq, row is not None, int(row[0]) if row else -1)

    def write(
        self, read: Read, key: str, fence: int, *, t_write: float, paused: bool
    ) -> tuple[bool, int]:
        """Write ``read.value + 1`` to ``key``'s counter with ``fence``, or be refused
        when the record carries a higher fence (``paused``: the worker was stopped
        between its read and this write); return (accepted, sequence number)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            seq = self._tick()
            accepted = (
                self.db.execute(
                    "UPDATE record SET value = ?, accepted = accepted + 1 "
                    "WHERE key = ? AND fence <= ?",
                    (read.value + 1, key, fence),
                ).rowcount
                == 1
            )
            self.db.execute(
                "UPDATE sections SET write_seq = ?, write_ok = ?, t_write = ?, "
                "paused = ? WHERE id = ?",
                (seq, accepted, t_write, paused, read.section),
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return accepted, seq

    def add_outcomes(self, worker: int, counts: dict[tuple[str, str], int]) -> None:
        """Add a worker's counts of outcomes (kind, detail) to the ledger's."""
        if not counts:
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany(
                "INSERT INTO outcomes VALUES (?, ?, ?, ?) ON CONFLICT (worker, kind, detail) "
                "DO UPDATE SET n = n + excluded.n",
                [(worker, kind, detail, n) for (kind, detail), n in counts.items()],
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    # What the coordinator reads.
    def holding(self) -> list[int]:
        """Return the workers between their read and their write (holding a lease)."""
        rows = self.db.execute(
            "SELECT DISTINCT worker FROM sections "
            "WHERE read_ok AND write_seq IS NULL "
            "AND id > (SELECT COALESCE(MAX(id), 0) - 50 FROM sections)"
        )
        return [int(w) for (w,) in rows]

    def sections(self) -> list[SectionRow]:
        """Return every section, in the order they were read."""
        rows = self.db.execute(
            "SELECT id, key, worker, fence, t_call, t_grant, after_seq, read_seq, read_ok, "
            "paused, write_seq, write_ok, t_write FROM sections ORDER BY read_seq"
        )
        return [
            SectionRow(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                r[7],
                bool(r[8]),
                bool(r[9]),
                r[10],
                None if r[11] is None else bool(r[11]),
                r[12],
            )
            for r in rows
        ]

    def records(self) -> dict[str, tuple[int, int]]:
        """Return each key's counter value and count of accepted writes."""
        return {
            k: (int(v), int(a))
            for k, v, a in self.db.execute("SELECT key, value, accepted FROM record")
        }

    def outcomes(self) -> dict[tuple[str, str], int]:
        """Return the workers' outcomes (kind, detail), summed."""
        rows = self.db.execute("SELECT kind, detail, SUM(n) FROM outcomes GROUP BY kind, detail")
        return {(kind, detail): int(n) for kind, detail, n in rows}
