"""Settings of the site ``python -m bench http_contended`` serves with gunicorn: the test
settings (PostgreSQL as ``default``, the real ``occupy`` databases), the benchmark's
routes (:mod:`bench.http_api`), occupy's middleware as the DRF how-to has it (so that
the plain viewset's ``VersionConflict`` is a 409, not a 500) and no debug."""

from __future__ import annotations

import os

os.environ.setdefault("OCCUPY_TEST_DB", "postgresql")

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "bench.http_api"
MIDDLEWARE = [*MIDDLEWARE, "occupy.middleware.OccupyErrorsMiddleware"]  # noqa: F405
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
