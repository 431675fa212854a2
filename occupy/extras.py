"""The optional dependencies: which extra of ``django-occupy`` brings which package.

A module of occupy whose feature needs one imports it through :func:`require`, so that a
project without it gets an ``ImportError`` that names the extra to install, when the
feature is used, never earlier: every module of occupy imports without its optional
dependencies until then (Celery's and Huey's autodiscovery of ``<app>.tasks`` included).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["missing_extra", "require"]


def missing_extra(feature: str, package: str, extra: str) -> str:
    """Return the message of the ``ImportError`` for ``feature`` without ``package``."""
    return f"{feature} needs {package}: pip install 'django-occupy[{extra}]'."


def require(module: str, *, feature: str, extra: str, package: str | None = None) -> ModuleType:
    """Return the module ``module``, or raise ``ImportError`` naming ``feature`` and the
    extra that installs it (``package``: its distribution's name, if not ``module``)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            missing_extra(feature, package or module, extra), name=e.name, path=e.path
        ) from e
