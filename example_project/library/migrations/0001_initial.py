from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Book",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                (
                    "status",
                    models.CharField(
                        choices=[("free", "free"), ("in use", "in use")],
                        default="free",
                        max_length=10,
                    ),
                ),
                (
                    "borrow_count",
                    models.PositiveIntegerField(
                        default=0, help_text="How many times the book was borrowed."
                    ),
                ),
                (
                    "stock",
                    models.IntegerField(
                        default=0, help_text="Copies on the shelf; each sale takes one."
                    ),
                ),
                ("tags", models.CharField(blank=True, default="", max_length=200)),
            ],
        ),
        migrations.CreateModel(
            name="Task",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("title", models.CharField(max_length=200)),
                ("category", models.CharField(blank=True, default="", max_length=50)),
                ("priority", models.IntegerField(default=0)),
                ("done", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "ordering": ["-priority", "created_at"],
            },
        ),
    ]
