"""The digest index and the unique slot move from the fields to ``Meta``.

On PostgreSQL, ``db_index`` and ``unique`` on a ``CharField`` also create a
``varchar_pattern_ops`` ("_like") index, which only ``LIKE`` queries use and every grant
and release writes; ``Meta.indexes`` and ``Meta.constraints`` create just the index.
Elsewhere the result is the same as before: one index on ``digest``, one unique on
``slot`` (NULL, for queued claims, as many times as there are).

The new index and constraint are made before the old ones go, so that no moment of the
migration lets a key have two granted claims, even where DDL is not transactional
(MariaDB). Django finds the old ones by their columns, whatever they were named.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("occupy", "0001_initial"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="occupation",
            index=models.Index(fields=["digest"], name="occupy_occupation_digest"),
        ),
        migrations.AddConstraint(
            model_name="occupation",
            constraint=models.UniqueConstraint(fields=("slot",), name="occupy_one_holder_per_key"),
        ),
        migrations.AlterField(
            model_name="occupation",
            name="digest",
            field=models.CharField(editable=False, max_length=64),
        ),
        migrations.AlterField(
            model_name="occupation",
            name="slot",
            field=models.CharField(editable=False, max_length=64, null=True),
        ),
    ]
