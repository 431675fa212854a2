"""Sphinx configuration of occupy's documentation (``make docs``)."""

from __future__ import annotations

import sys
from importlib.metadata import version as installed_version
from pathlib import Path

import django
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# autodoc imports occupy's modules, which need configured settings and loaded apps:
# the smallest project that installs occupy, the admin and DRF, with no server.
settings.configure(
    SECRET_KEY="docs-only",
    INSTALLED_APPS=[
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "django.contrib.staticfiles",
        "rest_framework",
        "occupy",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()

project = "occupy"
author = "The occupy developers"
copyright = "the occupy developers"
release = installed_version("django-occupy")  # make docs installs the checkout
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints_format = "short"
autodoc_default_options = {"show-inheritance": True}

html_theme = "furo"
html_title = f"occupy {release}"
