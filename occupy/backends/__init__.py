"""Build backends from ``OCCUPY["BACKENDS"]``, once per alias, like Django's ``caches``."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from occupy.conf import occupy_settings
from occupy.exceptions import InvalidBackendError

if TYPE_CHECKING:
    from occupy.backends.base import BaseBackend

__all__ = [
    "built_backends",
    "close_connections",
    "get_backend",
    "load_backend_class",
    "reset_backends",
]

_backends: dict[str, BaseBackend] = {}
_lock = threading.Lock()


def load_backend_class(path: Any, *, alias: str) -> type[BaseBackend]:
    """Import the backend class at dotted ``path``, or raise ``InvalidBackendError``."""
    from occupy.backends.base import BaseBackend

    if not isinstance(path, str) or not path:
        raise InvalidBackendError(
            f"OCCUPY['BACKENDS'][{alias!r}]['BACKEND'] must be a dotted class path, not {path!r}."
        )
    try:
        cls = import_string(path)
    except ImportError as e:
        raise InvalidBackendError(
            f"Could not import occupy backend {path!r} for alias {alias!r}: {e}"
        ) from e
    if not (isinstance(cls, type) and issubclass(cls, BaseBackend)):
        raise InvalidBackendError(
            f"occupy backend {path!r} for alias {alias!r} is not a subclass of "
            "occupy.backends.base.BaseBackend."
        )
    return cls


def get_backend(alias: str = "default") -> BaseBackend:
    """Return the backend configured under ``alias``, building it on first use."""
    backend = _backends.get(alias)
    if backend is not None:
        return backend
    if not isinstance(alias, str):
        raise TypeError(f"using must be a backend alias (str), not {type(alias).__name__}.")
    configs = occupy_settings.BACKENDS
    if alias not in configs:
        raise InvalidBackendError(
            f"No occupy backend is configured under the alias {alias!r}; "
            f"configured aliases: {sorted(configs)}."
        )
    config = configs[alias]
    if not isinstance(config, dict):
        raise InvalidBackendError(f"OCCUPY['BACKENDS'][{alias!r}] must be a dict.")
    cls = load_backend_class(config.get("BACKEND"), alias=alias)
    with _lock:
        backend = _backends.get(alias)
        if backend is None:
            backend = cls(alias, config)
            _backends[alias] = backend
    return backend


def reset_backends() -> None:
    """Forget built backends (on settings reload) and close what they hold."""
    with _lock:
        old = list(_backends.values())
        _backends.clear()
    for backend in old:
        backend.close()


def close_connections() -> None:
    """Close the connections occupy's backends made in this process, in every thread.

    The backends stay configured and connect again when next used. Call it where an
    app closes its own connections by hand (before forking workers, before dropping a
    database); at the end of a request and when a thread ends occupy closes them itself
    (see :mod:`occupy.backends.lifecycle`).
    """
    for backend in built_backends():
        backend.close()


def built_backends() -> list[BaseBackend]:
    """Return the backends built so far in this process (none is built here)."""
    with _lock:
        return list(_backends.values())


occupy_settings.on_reload(reset_backends)
