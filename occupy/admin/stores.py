"""``AdminBackendMixin``: the occupy backend of a model admin's edit leases and of its
"being edited" column, the model's own unless the admin names another (see
:mod:`occupy.models.stores`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core import checks

from occupy.models.stores import backend_checks, configured_backend

__all__ = ["AdminBackendMixin"]

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = object


class AdminBackendMixin(_ModelAdmin):
    """The ``occupy_backend`` every occupy admin mixin reads, and its checks."""

    #: The occupy backend alias of the leases and the column; ``None`` (the default):
    #: the model's ``occupy_backend``, the store ``obj.occupy()`` locks the object in.
    occupy_backend: str | None = None

    def get_occupy_backend(self) -> str:
        """Return the occupy backend alias that locks this admin's objects; raise
        :class:`~occupy.Misconfigured` when it is not configured."""
        return configured_backend(self, self.model)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Add ``occupy.E102``: ``occupy_backend`` is not configured, and
        ``occupy.W303``: it names another alias than the model's."""
        return [
            *super().check(**kwargs),
            *backend_checks(self, self.model, check_id="occupy.E102"),
        ]
