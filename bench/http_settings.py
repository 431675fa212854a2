"""Settings of the site ``python -m bench http_contended`` serves with gunicorn: the test
settings (PostgreSQL as ``default``, the real ``occupy`` databases), the benchmark's
routes (:mod:`bench.http_api`) and nothing a production site would not have (no debug)."""

from __future__ import annotations

import os

os.environ.setdefault("OCCUPY_TEST_DB", "postgresql")

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "bench.http_api"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
