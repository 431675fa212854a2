"""The library app of the example project."""

from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created


def use_wal(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Put a SQLite database in write-ahead-log mode, so that readers run beside the one
    writer (on Django 5.1+, ``OPTIONS["init_command"]`` can say this instead)."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode=WAL")


class LibraryConfig(AppConfig):
    """The library: books students borrow and admins rename, tasks editors take."""

    name = "example_project.library"
    label = "library"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        connection_created.connect(use_wal, dispatch_uid="example_project.library.use_wal")
