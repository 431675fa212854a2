"""Insert many ``Occupation`` rows at once with one raw statement (for sweeps at scale).

The ORM would need one round trip per row or a list of 100,000 objects in memory; a
single ``INSERT … SELECT`` over a generated series needs neither. Half the rows are
``using`` (slot = digest, with a fence), half ``pending`` (no slot, no fence), so that
the table's check constraint holds and both kinds are swept. The benchmarks use it too.
"""

from __future__ import annotations

from django.db import connections

__all__ = ["count_claims", "insert_claims", "tokens_of"]

TABLE = "occupy_occupation"
COLUMNS = (
    "key, digest, slot, content_type_id, object_id, owner, token, state, fence, depth, "
    "expires_at, created_at"
)


def insert_claims(database: str, count: int, *, tag: str, expired: bool) -> None:
    """Insert ``count`` claims on keys ``"<tag>:<n>"`` into ``database`` in one statement.

    Expired claims expired between 1 s and 1 h ago; live ones expire in 1 to 2 h. Tokens are
    distinct (so a test can tell the claims apart) and digests are unique.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}.")
    connection = connections[database]
    vendor = connection.vendor
    # Expired: 1 s to 1 h ago. Live: 1 to 2 h ahead, so none expires during a test.
    sign, base = ("-", 1) if expired else ("+", 3600)
    if vendor == "postgresql":
        sql = (
            f"INSERT INTO {TABLE} ({COLUMNS}) "
            "SELECT k, d, CASE WHEN i % 2 = 0 THEN d END, NULL, NULL, 'bulk', md5(k), "
            "CASE WHEN i % 2 = 0 THEN 'using' ELSE 'pending' END, "
            "CASE WHEN i % 2 = 0 THEN i END, 1, "
            f"now() {sign} ({base} + i % 3600) * interval '1 second', now() "
            "FROM (SELECT i, k, encode(sha256(convert_to(k, 'UTF8')), 'hex') AS d "
            "FROM (SELECT i, %s || ':' || i AS k FROM generate_series(1, %s) AS i) s) t"
        )
        params: list[str | int] = [tag, count]
    elif vendor == "mysql":
        # MariaDB's SEQUENCE engine: seq_1_to_<n> is a table of 1..n.
        sql = (
            f"INSERT INTO {TABLE} ({COLUMNS.replace('key', '`key`', 1)}) "
            "SELECT k, d, IF(seq % 2 = 0, d, NULL), NULL, NULL, 'bulk', MD5(k), "
            "IF(seq % 2 = 0, 'using', 'pending'), IF(seq % 2 = 0, seq, NULL), 1, "
            f"UTC_TIMESTAMP(6) {sign} INTERVAL ({base} + seq % 3600) SECOND, UTC_TIMESTAMP(6) "
            "FROM (SELECT seq, k, SHA2(k, 256) AS d FROM (SELECT seq, CONCAT(%s, ':', seq) "
            f"AS k FROM seq_1_to_{int(count)}) s) t"
        )
        params = [tag]
    elif vendor == "sqlite":
        # No SHA-256 in SQLite: random 256-bit digests, unique with certainty in practice,
        # drawn once per row (MATERIALIZED: else each use of d would draw again).
        sql = (
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %s), "
            "t AS MATERIALIZED (SELECT i, %s || ':' || i AS k, lower(hex(randomblob(32))) AS d "
            "FROM n) "
            f"INSERT INTO {TABLE} ({COLUMNS}) "
            "SELECT k, d, CASE WHEN i % 2 = 0 THEN d END, NULL, NULL, 'bulk', "
            "lower(hex(randomblob(16))), CASE WHEN i % 2 = 0 THEN 'using' ELSE 'pending' END, "
            "CASE WHEN i % 2 = 0 THEN i END, 1, "
            f"strftime('%Y-%m-%d %H:%M:%f', 'now', '{sign}' || ({base} + i % 3600) || ' seconds'), "
            "strftime('%Y-%m-%d %H:%M:%f', 'now') FROM t"
        )
        params = [count, tag]
    else:
        raise NotImplementedError(f"insert_claims does not support {vendor!r}.")
    # Literal percent signs doubled: every Django cursor formats the statement.
    sql = sql.replace("%", "%%").replace("%%s", "%s")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def tokens_of(database: str, tag: str) -> set[str]:
    """Return the tokens of the claims on keys ``"<tag>:…"``."""
    quote = "`" if connections[database].vendor == "mysql" else '"'
    with connections[database].cursor() as cursor:
        cursor.execute(f"SELECT token FROM {TABLE} WHERE {quote}key{quote} LIKE %s", [f"{tag}:%"])
        return {token for (token,) in cursor.fetchall()}


def count_claims(database: str, *, expired: bool | None = None) -> int:
    """Return how many claims ``database`` has (only expired or live ones, if asked)."""
    from django.db.models.functions import Now

    from occupy.models import Occupation

    rows = Occupation.objects.using(database)
    if expired is True:
        rows = rows.filter(expires_at__lte=Now())
    elif expired is False:
        rows = rows.filter(expires_at__gt=Now())
    return rows.count()
