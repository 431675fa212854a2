"""Settings of the example project: a library site on SQLite, no server needed.

The ``default`` lock backend is the database one (what no ``OCCUPY`` setting at all
would give); a file backend sits beside it, and a Redis and a cache backend when a Redis
server answers on 127.0.0.1:6379 (``race_demo`` then shows rows for them too;
``EXAMPLE_REDIS=off`` leaves them out). ``EXAMPLE_DB=postgresql`` runs the same site on
the local PostgreSQL (database ``EXAMPLE_PG_NAME``, default ``occupy``); ``EXAMPLE_SQLITE``
moves the SQLite file.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
VAR = BASE_DIR / "var"
VAR.mkdir(exist_ok=True)

SECRET_KEY = os.environ.get("EXAMPLE_SECRET_KEY", "example-only-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

# Swagger UI's scripts and styles from the drf-spectacular-sidecar package (the dev
# extra installs it), so /api/docs/ works offline; without it, from drf-spectacular's
# default CDN.
SIDECAR = importlib.util.find_spec("drf_spectacular_sidecar") is not None

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    *(["drf_spectacular_sidecar"] if SIDECAR else []),
    "occupy",
    "example_project.library",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # occupy's conditions answered (409, 423, 503…) on any view, never a 500.
    "occupy.middleware.OccupyErrorsMiddleware",
]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "example_project.wsgi.application"

if os.environ.get("EXAMPLE_DB") == "postgresql":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("EXAMPLE_PG_NAME", "occupy"),
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": 5432,
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("EXAMPLE_SQLITE", VAR / "library.sqlite3"),
            # The timeout rides out the short write locks of several demo processes;
            # the library app puts the database in WAL mode (library/apps.py).
            "OPTIONS": {"timeout": 30},
        }
    }


def _redis_is_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.3):
            return True
    except OSError:
        return False


CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
OCCUPY = {
    "BACKENDS": {
        "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
        "files": {"BACKEND": "occupy.backends.file.FileBackend", "LOCATION": str(VAR / "locks")},
    },
}
if os.environ.get("EXAMPLE_REDIS", "auto") != "off" and _redis_is_up():
    CACHES["locks"] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:6379/5",
        "KEY_PREFIX": "library",
    }
    OCCUPY["BACKENDS"]["redis"] = {
        "BACKEND": "occupy.backends.redis.RedisBackend",
        # The backend writes raw Redis keys: the cache's KEY_PREFIX is not applied.
        "OPTIONS": {"CACHE": "locks", "PREFIX": "library:occupy:"},
    }
    OCCUPY["BACKENDS"]["cache"] = {
        "BACKEND": "occupy.backends.cache.CacheBackend",
        "OPTIONS": {"CACHE": "locks"},
    }

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.DjangoModelPermissionsOrAnonReadOnly",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    **(
        {
            "SWAGGER_UI_DIST": "SIDECAR",
            "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
            "REDOC_DIST": "SIDECAR",
        }
        if SIDECAR
        else {}
    ),
    "TITLE": "occupy example: the library",
    "DESCRIPTION": "Books and tasks. Writes are conditional (If-Match with the ETag of a "
    "GET, or the body's version), never land inside someone else's edit "
    "lease, and the leases live under /{pk}/lease/.",
    "VERSION": "1",
}
