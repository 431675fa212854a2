"""The library app of the example project."""

from django.apps import AppConfig


class LibraryConfig(AppConfig):
    """The seeds' library: books students borrow and admins rename, tasks editors pull."""

    name = "example_project.library"
    label = "library"
    default_auto_field = "django.db.models.BigAutoField"
