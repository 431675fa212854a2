"""Where occupy's documentation is published, for messages that point a reader to it.

``manage.py check`` hints name a page of the published site, not a path in the source
tree: a project that installed occupy from a wheel has no ``docs/``.
"""

from __future__ import annotations

__all__ = ["DOCS_URL", "docs_url"]

#: The published documentation (built by ``.readthedocs.yaml`` as ``make docs`` builds it).
DOCS_URL = "https://django-occupy.readthedocs.io/en/stable/"


def docs_url(page: str) -> str:
    """Return the address of ``page`` of the documentation: a path under ``docs/``
    without its suffix (``"reference/settings"``), with an optional ``#anchor``, or a
    folder ending in ``/``."""
    path, hash_, anchor = page.partition("#")
    if not path.endswith("/"):
        path += ".html"
    return f"{DOCS_URL}{path}{hash_}{anchor}"
