"""The claims table, ``occupy_occupation``.

The digest index and the unique slot are declared in ``Meta``, not on the fields: on
PostgreSQL, ``db_index`` and ``unique`` on a ``CharField`` also build a
``varchar_pattern_ops`` ("_like") index, which only ``LIKE`` queries use and every grant
and release would write. The slot is NULL for queued claims, as many times as there are.
"""

import django.db.models.deletion
from django.db import migrations, models


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
    ]
