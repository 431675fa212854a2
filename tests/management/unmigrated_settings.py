"""Settings of a project whose database never saw occupy's migration (a fresh SQLite
file in ``OCCUPY_UNMIGRATED_DIR``), with a file backend beside it: see
test_failures.py."""

import os

_DIR = os.environ["OCCUPY_UNMIGRATED_DIR"]
SECRET_KEY = "unmigrated-only-not-secret"
INSTALLED_APPS = ["django.contrib.contenttypes", "occupy"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(_DIR, "never-migrated.sqlite3"),
    }
}
OCCUPY = {
    "BACKENDS": {
        "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
        "files": {
            "BACKEND": "occupy.backends.file.FileBackend",
            "LOCATION": os.path.join(_DIR, "locks"),
        },
    }
}
USE_TZ = True
