"""The settings a user of occupy.django_tasks writes: occupy, their app, a tasks backend
(Django's immediate one, and a queue of their own that can look results up); nothing of
the test suite's (no django-tasks-db)."""

from __future__ import annotations

import importlib.util
import os

FRAMEWORK = "django.tasks" if importlib.util.find_spec("django.tasks") else "django_tasks"

SECRET_KEY = "tasks-project"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "occupy",
    "shop",
    # The backport on Django 5.2, as its README says; Django 6 has the framework.
    *(["django_tasks"] if FRAMEWORK == "django_tasks" else []),
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["SHOP_DB_PATH"]}
}
TASKS = {
    "default": {"BACKEND": f"{FRAMEWORK}.backends.immediate.ImmediateBackend"},
    "queue": {"BACKEND": "shop.queue.MemoryQueueBackend"},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
