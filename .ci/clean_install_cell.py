"""One cell of the clean-install matrix (.ci/clean_install.py), run by the cell's own
Python in the project ``django-admin startproject proj`` made:

    python clean_install_cell.py setup EXTRA   # settings and files the how-to adds
    python clean_install_cell.py run EXTRA     # the public modules, then the how-to

It uses nothing but what the cell installed: Django, occupy's wheel and the extra. The
how-tos it runs are in .ci/clean_install_howtos.py.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from clean_install_howtos import CELL, DJANGO_6, FRAMEWORK, run_howto

#: The public modules the docs name (``module:name``: a name loaded on first use), and
#: the extra each needs (None: none).
PUBLIC = {
    "occupy": None,
    "occupy.models": None,
    "occupy.admin": None,
    "occupy.checks": None,
    "occupy.exceptions": None,
    "occupy.leases": None,
    "occupy.signals": None,
    "occupy.owners": None,
    "occupy.validation": None,
    "occupy.middleware": None,
    "occupy.telemetry": None,
    "occupy.testing": None,
    "occupy.testing.memory": None,
    "occupy.backends.base": None,
    "occupy.backends.db": None,
    "occupy.backends.cache": None,
    "occupy.backends.file": None,
    "occupy.taskcore": None,
    "occupy.django_tasks": None,
    "occupy.django_tasks.base": None if DJANGO_6 else "tasks",
    "occupy.django_tasks:task": None if DJANGO_6 else "tasks",  # the how-to's import
    "occupy.backends.redis": "redis",
    "occupy.backends.etcd": "etcd",
    "occupy.celery": "celery",
    "occupy.celery.beat": "celery",
    "occupy.rest_framework": "drf",
    "occupy.rest_framework.handlers": "drf",
    "occupy.rest_framework.schema": "drf",
}

#: The settings each how-to adds (``"shop"``, the project's app for the how-to's files,
#: is added by setup() when there are any), with ``{cell}`` the cell's name and
#: ``{etcd}`` the client URL of the etcd member the driver started (``CLEAN_ETCD``).
SETTINGS = {
    "none": "",
    "telemetry": "",
    "redis": """
CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                      "LOCATION": "redis://127.0.0.1:6379/0"}}
OCCUPY = {"BACKENDS": {
    "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
    "redis": {"BACKEND": "occupy.backends.redis.RedisBackend",
              "OPTIONS": {"CACHE": "default", "PREFIX": "occupy-clean-{cell}:"}},
}}
""",
    # docs/backends/etcd.md's block, with one member's endpoint.
    "etcd": """
OCCUPY = {
    "BACKENDS": {
        "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
        "etcd": {
            "BACKEND": "occupy.backends.etcd.EtcdBackend",
            "OPTIONS": {
                "ENDPOINTS": ["{etcd}"],
            },
        },
    },
}
""",
    "postgres": """
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "occupy_clean_{cell}",
                         "USER": "postgres", "HOST": "127.0.0.1", "PORT": 5432}}
""",
    "drf": """
INSTALLED_APPS += ["rest_framework", "drf_spectacular"]
REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}
""",
    "celery": """
CELERY_BROKER_URL = "amqp://guest:guest@127.0.0.1:5672//"
CELERY_TASK_DEFAULT_QUEUE = "occupy-clean-{cell}"
CELERY_TASK_IGNORE_RESULT = True
""",
    "tasks": ("" if DJANGO_6 else 'INSTALLED_APPS += ["django_tasks"]\n')
    + f'TASKS = {{"default": {{"BACKEND": "{FRAMEWORK}.backends.immediate.ImmediateBackend"}}}}\n',
}

#: The how-tos a cell runs beyond its extra's own. Django 6's tasks framework needs no
#: extra ("install occupy alone", docs/howto/django-tasks.md), so there the cell without
#: one also runs the tasks how-to, on django.tasks with no backport installed.
ALSO = {"none": ["tasks"]} if DJANGO_6 else {}

#: The project's files each how-to adds (relative to the project).
FILES = {
    # The admin how-to (docs/howto/admin.md), which needs no extra.
    "none": {
        "shop/__init__.py": "",
        "shop/models.py": """
from django.db import models
from occupy.models import OccupiableMixin, VersionedMixin


class Book(VersionedMixin, OccupiableMixin, models.Model):
    class Status(models.TextChoices):
        FREE = "free"
        LENT = "lent"

    name = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.FREE)
""",
        "shop/admin.py": """
from django.contrib import admin
from occupy.admin import EditLeaseAdminMixin, OccupyStatusAdminMixin, VersionedAdminMixin

from shop.models import Book


@admin.register(Book)
class BookAdmin(EditLeaseAdminMixin, VersionedAdminMixin, OccupyStatusAdminMixin, admin.ModelAdmin):
    list_display = ["name", "status", "occupy_status"]
    edit_lease_ttl = 120  # seconds (the default); the page renews every ttl/3
""",
    },
    "drf": {
        "shop/__init__.py": "",
        "shop/models.py": """
from django.db import models

from occupy.models import OccupiableMixin, VersionedMixin


class Book(VersionedMixin, OccupiableMixin, models.Model):
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=10, default="free")
""",
        "shop/api.py": """
from rest_framework import permissions, routers, serializers, viewsets

from occupy.rest_framework import OccupyModelSerializerMixin, OccupyViewMixin
from shop.models import Book


class BookSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Book
        fields = ["id", "name", "status"]


class BookViewSet(OccupyViewMixin, viewsets.ModelViewSet):
    queryset = Book.objects.all()
    serializer_class = BookSerializer
    permission_classes = [permissions.DjangoModelPermissions]


router = routers.DefaultRouter()
router.register("books", BookViewSet)
""",
        "proj/urls.py": """
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from shop.api import router

urlpatterns = [
    path("api/", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
]
""",
    },
    "celery": {
        # Celery's own "First steps with Django": the app, and its import on start-up.
        "proj/celery.py": """
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
app = Celery("proj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
""",
        "proj/__init__.py": "from .celery import app as celery_app\n\n__all__ = ('celery_app',)\n",
        "shop/__init__.py": "",
        "shop/tasks.py": """
import json

import occupy
from celery import shared_task
from occupy.celery import OccupyTask


@shared_task(bind=True, base=OccupyTask, occupy_key="report:{account_id}", occupy_ttl=60)
def build_report(self, account_id, out):
    held = occupy.holder(self.lease.key)
    with open(out, "w") as f:
        json.dump({"key": self.lease.key, "fence": self.lease.fence, "owner": held.owner,
                   "id": self.request.id}, f)
""",
    },
    "tasks": {
        "shop/__init__.py": "",
        "shop/tasks.py": """
import occupy
from occupy.django_tasks import current_lease, task


@task(occupy_key="report:{account_id}", occupy_ttl=60, occupy_on_busy="skip")
def build_report(account_id: int) -> list:
    lease = current_lease()
    return [lease.key, lease.fence, occupy.holder(lease.key).owner]
""",
    },
}


def howtos(extra: str) -> list[str]:
    """Return the how-tos the cell of ``extra`` runs."""
    return [extra, *ALSO.get(extra, [])]


def setup(extra: str) -> None:
    """Add ``"occupy"`` and the settings and files of the cell's how-tos to the project."""
    settings = Path("proj/settings.py")
    text = settings.read_text().replace(
        "INSTALLED_APPS = [", 'INSTALLED_APPS = [\n    "occupy",', 1
    )
    text += (
        "".join(SETTINGS[howto] for howto in howtos(extra))
        .replace("{cell}", CELL)
        .replace("{etcd}", os.environ.get("CLEAN_ETCD", "http://127.0.0.1:2379"))
    )
    files = {name: body for howto in howtos(extra) for name, body in FILES.get(howto, {}).items()}
    if any(name.startswith("shop/") for name in files):
        text += 'INSTALLED_APPS += ["shop"]\n'
    settings.write_text(text)
    for name, content in files.items():
        path = Path(name)
        path.parent.mkdir(exist_ok=True)
        path.write_text(content.lstrip())


def check_imports(extra: str) -> None:
    """Import every public module: it imports, or names the extra it needs."""
    for public, needs in PUBLIC.items():
        module, _, name = public.partition(":")
        try:
            imported = importlib.import_module(module)
            if name:
                getattr(imported, name)
        except Exception as e:
            if needs is None or needs == extra or f"django-occupy[{needs}]" not in str(e):
                raise AssertionError(f"import {public}: {type(e).__name__}: {e}") from e
        else:
            assert needs in (None, extra), f"{public} imported without the {needs} extra"


def run(extra: str) -> None:
    """Set Django up, check the imports, run the extra's how-to."""
    import django

    if extra == "postgres":
        _create_database()
    django.setup()
    check_imports(extra)
    from django.core.management import call_command

    if extra in ("drf", "none"):
        call_command("makemigrations", "shop", verbosity=0)
    call_command("migrate", verbosity=0)
    for howto in howtos(extra):
        run_howto(howto, extra)
    print(f"{CELL}: ok")


def _create_database() -> None:
    import psycopg

    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS occupy_clean_{CELL}")
        c.execute(f"CREATE DATABASE occupy_clean_{CELL}")


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    {"setup": setup, "run": run}[sys.argv[1]](sys.argv[2])
