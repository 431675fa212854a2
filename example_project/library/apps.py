"""The library app of the example project."""

from django.apps import AppConfig


class LibraryConfig(AppConfig):
    """The library: books students borrow and admins rename, tasks editors take."""

    name = "example_project.library"
    label = "library"
    default_auto_field = "django.db.models.BigAutoField"
