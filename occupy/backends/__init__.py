"""Build backends from ``OCCUPY["BACKENDS"]``, once per alias, like Django's ``caches``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from occupy.conf import occupy_settings
from occupy.exceptions import InvalidBackendError

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

    from occupy.backends.base import BaseBackend

__all__ = [
    "built_backends",
    "close_connections",
    "get_backend",
    "load_backend_class",
    "reset_backends",
]

logger = logging.getLogger("occupy.backends")

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


def get_backend(alias: str = "default", *, config: Mapping[str, Any] | None = None) -> BaseBackend:
    """Return the backend configured under ``alias``, building it on first use.

    With ``config``, ``alias`` is one that ``OCCUPY["BACKENDS"]`` does not name, built
    from ``config`` instead (``CacheLock``'s backend of a cache). Such a configuration
    meets no ``manage.py check``, so its checks run when it is built: their errors are
    raised as ``InvalidBackendError``, their warnings logged. It is kept, and forgotten
    on settings reload, like the others; asked for with another ``config``, it is built
    again.
    """
    backend = _backends.get(alias)
    if backend is not None and (config is None or backend.params == config):
        return backend
    if not isinstance(alias, str):
        raise TypeError(f"backend must be a backend alias (str), not {type(alias).__name__}.")
    if config is None:
        config = _configured(alias)
    elif alias in occupy_settings.BACKENDS:
        raise InvalidBackendError(
            f"{alias!r} is configured in OCCUPY['BACKENDS']: it takes no other configuration."
        )
    else:
        _check(alias, config)
    cls = load_backend_class(config.get("BACKEND"), alias=alias)
    with _lock:
        backend = _backends.get(alias)
        if backend is None or backend.params != config:
            backend = cls(alias, config)
            _backends[alias] = backend
    return backend


def _configured(alias: str) -> Mapping[str, Any]:
    """Return the configuration of ``alias`` in ``OCCUPY["BACKENDS"]``."""
    configs = occupy_settings.BACKENDS
    if alias not in configs:
        raise InvalidBackendError(
            f"No occupy backend is configured under the alias {alias!r}; "
            f"configured aliases: {sorted(configs)}."
        )
    config = configs[alias]
    if not isinstance(config, dict):
        raise InvalidBackendError(f"OCCUPY['BACKENDS'][{alias!r}] must be a dict.")
    return config


def _check(alias: str, config: Mapping[str, Any]) -> None:
    """Run the system checks of a configuration given to :func:`get_backend`: raise its
    errors, log its warnings."""
    messages = load_backend_class(config.get("BACKEND"), alias=alias).check(alias, config)
    errors = [m for m in messages if m.is_serious()]
    if errors:
        raise InvalidBackendError(" ".join(_sentence(m) for m in errors))
    for message in messages:
        logger.warning("%s", _sentence(message))


def _sentence(message: CheckMessage) -> str:
    hint = f" {message.hint}" if message.hint else ""
    return f"{message.msg}{hint} ({message.id})"


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
