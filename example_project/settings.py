"""Settings of the example project: a library site on SQLite, no server needed.

``OCCUPY`` is left out on purpose: no setting means the database backend on the
``default`` database, the embedded default. ``EXAMPLE_DB=postgresql`` runs the same site
on the local PostgreSQL; ``EXAMPLE_SQLITE`` moves the SQLite file.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
VAR = BASE_DIR / "var"
VAR.mkdir(exist_ok=True)

SECRET_KEY = os.environ.get("EXAMPLE_SECRET_KEY", "example-only-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
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
    DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "occupy",
                             "USER": "postgres", "HOST": "127.0.0.1", "PORT": 5432}}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("EXAMPLE_SQLITE", VAR / "library.sqlite3"),
            # WAL lets readers run beside the one writer; the timeout rides out the
            # short write locks of several demo processes.
            "OPTIONS": {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"},
        }
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
}
