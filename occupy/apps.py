"""The occupy app config: registers the system checks."""

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class OccupyConfig(AppConfig):
    """Django app config for occupy."""

    name = "occupy"
    verbose_name = _("Occupy")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the system checks."""
        from occupy import checks  # noqa: F401 - registers on import
