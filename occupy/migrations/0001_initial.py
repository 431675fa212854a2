"""The claims table, ``occupy_occupation``.

The digest index and the unique slot are declared in ``Meta``, not on the fields: on
PostgreSQL, ``db_index`` and ``unique`` on a ``CharField`` also build a
``varchar_pattern_ops`` ("_like") index, which only ``LIKE`` queries use and every grant
and release would write. The slot is NULL for queued claims, as many times as there are.

On PostgreSQL, also the function ``occupy_hold(slot, advisory id, token)`` that holds a
free key for the caller's transaction in one statement (see
:mod:`occupy.backends.db.transaction`): it returns ``'ok'`` or why not (``'isolation'``,
``'busy'``, ``'leased'``, ``'lost'``, ``'capacity'``) and never raises for those, so the
caller's transaction stays usable without a savepoint. A ``VOLATILE`` PL/pgSQL function
takes a fresh snapshot for each query it runs, so it reads the lease table after the
lock was granted; it gives the lock back by leaving its ``BEGIN … EXCEPTION`` block (a
subtransaction); and it keeps its queries' plans for the session, where the caller's
connection, binding parameters on the client, would plan the lease check every time.
"""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

#: Keep the statements' text in step with the dialect's ``tx_no_lease`` and
#: ``tx_own_lease`` (the savepoint path, used while waiting).
CREATE = """
CREATE OR REPLACE FUNCTION occupy_hold(p_slot text, p_id bigint, p_token text)
RETURNS text LANGUAGE plpgsql VOLATILE AS $occupy$
DECLARE
    why text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN 'isolation';
    END IF;
    BEGIN
        IF NOT pg_try_advisory_xact_lock(p_id) THEN
            RETURN 'busy';
        END IF;
        -- A fresh snapshot, taken after the lock was granted: every grant takes the
        -- same lock for its own transaction, so a lease granted before is seen.
        IF p_token IS NULL THEN
            IF EXISTS (SELECT 1 FROM occupy_occupation WHERE slot = p_slot
                       AND (expires_at > statement_timestamp()) IS TRUE) THEN
                why := 'leased';
            END IF;
        ELSIF NOT EXISTS (SELECT 1 FROM occupy_occupation WHERE slot = p_slot
                          AND token = p_token
                          AND (expires_at > statement_timestamp()) IS TRUE) THEN
            why := 'lost';
        END IF;
        IF why IS NOT NULL THEN
            -- Leaving the block by an error gives the lock back.
            RAISE EXCEPTION USING ERRCODE = 'OC001', MESSAGE = 'occupy: ' || why;
        END IF;
        RETURN 'ok';
    EXCEPTION
        WHEN SQLSTATE 'OC001' THEN
            RETURN why;
        WHEN out_of_memory THEN  -- the server's lock table is full
            RETURN 'capacity';
    END;
END
$occupy$
"""
DROP = "DROP FUNCTION IF EXISTS occupy_hold(text, bigint, text)"


def create(apps: Any, schema_editor: Any) -> None:
    """Create the function on PostgreSQL."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps: Any, schema_editor: Any) -> None:
    """Drop the function on PostgreSQL."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.CreateModel(
            name="Occupation",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("key", models.CharField(max_length=255, verbose_name="key")),
                ("digest", models.CharField(editable=False, max_length=64)),
                ("slot", models.CharField(editable=False, max_length=64, null=True)),
                (
                    "object_id",
                    models.CharField(
                        blank=True, max_length=255, null=True, verbose_name="object id"
                    ),
                ),
                ("owner", models.CharField(max_length=255, verbose_name="owner")),
                ("token", models.CharField(editable=False, max_length=64)),
                (
                    "state",
                    models.CharField(
                        choices=[("pending", "pending"), ("using", "using")],
                        max_length=8,
                        verbose_name="state",
                    ),
                ),
                ("fence", models.BigIntegerField(blank=True, null=True, verbose_name="fence")),
                ("depth", models.PositiveIntegerField(default=1, verbose_name="depth")),
                ("expires_at", models.DateTimeField(db_index=True, verbose_name="expires at")),
                ("created_at", models.DateTimeField(verbose_name="created at")),
                (
                    "content_type",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="contenttypes.contenttype",
                    ),
                ),
            ],
            options={
                "verbose_name": "occupation",
                "verbose_name_plural": "occupations",
                "db_table": "occupy_occupation",
                "ordering": ["key", "id"],
                "permissions": [("force_release_occupation", "Can force-release an occupation")],
                "indexes": [models.Index(fields=["digest"], name="occupy_occupation_digest")],
                "constraints": [
                    models.UniqueConstraint(fields=("slot",), name="occupy_one_holder_per_key"),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("fence__isnull", False),
                                ("slot", models.F("digest")),
                                ("state", "using"),
                            ),
                            models.Q(("slot__isnull", True), ("state", "pending")),
                            _connector="OR",
                        ),
                        name="occupy_using_holds_the_slot",
                    ),
                ],
            },
        ),
        migrations.RunPython(create, drop, elidable=False),
    ]
