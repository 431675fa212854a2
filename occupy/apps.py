"""The occupy app config: registers the system checks, the connection lifecycle and the
OpenAPI extension."""

from django.apps import AppConfig, apps
from django.utils.translation import gettext_lazy as _


class OccupyConfig(AppConfig):
    """Django app config for occupy."""

    name = "occupy"
    verbose_name = _("Occupy")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the system checks (those of the tasks' options, and of the DRF views
        where DRF is installed),
        close occupy's connections where Django closes its own
        (:mod:`occupy.backends.lifecycle`), end a deleted row's edit lease
        (:mod:`occupy.models.deletion`), and register the OpenAPI extension where
        drf-spectacular is installed."""
        from occupy import checks, taskcore  # noqa: F401 - register their checks on import
        from occupy.backends.lifecycle import connect_receivers
        from occupy.models.deletion import connect_lease_endings

        connect_receivers()
        connect_lease_endings()

        if not apps.is_installed("rest_framework"):
            return
        from occupy.rest_framework import checks as rest_framework_checks  # noqa: F401

        try:
            import drf_spectacular  # noqa: F401
        except ImportError:
            return
        from occupy.rest_framework import schema  # noqa: F401 - registers on import
