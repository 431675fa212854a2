"""The test app's configuration: SQLite test databases in WAL mode."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created


def use_wal(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Put a SQLite database in write-ahead-log mode, so that the suite's processes read
    while one writes (``OPTIONS["init_command"]`` does this only from Django 5.1 on)."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")


class TestAppConfig(AppConfig):
    """The models and API the suite runs occupy against."""

    name = "tests.testapp"
    label = "testapp"

    def ready(self) -> None:
        connection_created.connect(use_wal, dispatch_uid="tests.testapp.use_wal")
