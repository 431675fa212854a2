"""The shop's settings: occupy on the database (as in production), the database from
``SHOP_DB`` (``sqlite``, ``postgresql`` or ``mysql``; test database names end with
``SHOP_DB_SUFFIX``)."""

import os
from pathlib import Path

SECRET_KEY = "shop-tests-only"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "occupy", "shop"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "shop.urls"

_SUFFIX = os.environ.get("SHOP_DB_SUFFIX", "")
_HOST = os.environ.get("SHOP_DB_HOST", "127.0.0.1")
_DATABASES = {
    "sqlite": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(Path(__file__).resolve().parent.parent / f".shop{_SUFFIX}.sqlite3"),
        # A file, not memory: occupy's database backend has connections of its own.
        "TEST": {
            "NAME": str(Path(__file__).resolve().parent.parent / f".shop-test{_SUFFIX}.sqlite3")
        },
        "OPTIONS": {"timeout": 30},
    },
    "postgresql": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "postgres",
        "USER": "postgres",
        "HOST": _HOST,
        "PORT": 5432,
        "TEST": {"NAME": f"test_shop{_SUFFIX}"},
    },
    "mysql": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "",
        "USER": "root",
        "HOST": _HOST,
        "PORT": 3306,
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {"NAME": f"test_shop{_SUFFIX}", "CHARSET": "utf8mb4"},
    },
}
DATABASES = {"default": _DATABASES[os.environ.get("SHOP_DB", "sqlite")]}

# Production's choice; the tests put locks in memory with the occupy_memory fixture.
OCCUPY = {"BACKENDS": {"default": {"BACKEND": "occupy.backends.db.DatabaseBackend"}}}
