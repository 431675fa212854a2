"""One cell of the clean-install matrix (.ci/clean_install.py), run by the cell's own
Python in the project ``django-admin startproject proj`` made:

    python clean_install_cell.py setup EXTRA   # settings and files the how-to adds
    python clean_install_cell.py run EXTRA     # the public modules, then the how-to

It uses nothing but what the cell installed: Django, occupy's wheel and the extra.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CELL = os.environ.get("CLEAN_CELL", "cell")
DJANGO_6 = importlib.util.find_spec("django.tasks") is not None
FRAMEWORK = "django.tasks" if DJANGO_6 else "django_tasks"

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
#: is added by setup() when there are any).
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
    "etcd": """
OCCUPY = {"BACKENDS": {
    "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
    "etcd": {"BACKEND": "occupy.backends.etcd.EtcdBackend",
             "OPTIONS": {"ENDPOINTS": ["http://127.0.0.1:2379"]}},
}}
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
    text += "".join(SETTINGS[howto] for howto in howtos(extra)).replace("{cell}", CELL)
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
        HOWTOS.get(howto, _lock)(extra)
    print(f"{CELL}: ok")


def _create_database() -> None:
    import psycopg

    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS occupy_clean_{CELL}")
        c.execute(f"CREATE DATABASE occupy_clean_{CELL}")


def _lock(extra: str) -> None:
    """The README's first lines: a lease on a key, seen by others, released."""
    import occupy

    alias = {"redis": "redis"}.get(extra, "default")
    with occupy.lock(f"clean:{CELL}", ttl=30, timeout=5, backend=alias) as lease:
        holder = occupy.holder(lease.key, backend=alias)
        assert holder is not None and holder.owner == lease.owner and lease.fence > 0
    assert occupy.holder(f"clean:{CELL}", backend=alias) is None


def _admin(extra: str) -> None:
    """The admin how-to: the first editor of a book gets its change form under an edit
    lease, a second one a read-only page naming her, and the changelist its filter."""
    from django.contrib.auth.models import User
    from django.test import Client
    from shop.models import Book

    book = Book.objects.create(name="Dune")
    url = f"/admin/shop/book/{book.pk}/change/"
    pages = []
    for name in ("Ann", "Bob"):
        user = User.objects.create_superuser(name.lower(), password="pw", first_name=name)
        client = Client(HTTP_HOST="localhost")  # a host startproject's DEBUG settings allow
        client.force_login(user)
        page = client.get(url)
        assert page.status_code == 200, page
        pages.append((user, client, page.content.decode()))
    (ann, client, first), (_bob, _client, second) = pages
    holder = book.get_holder()
    assert holder is not None and holder.owner.startswith(f"admin:user:{ann.pk}:"), holder
    assert 'name="name"' in first and 'name="name"' not in second
    assert "Ann is editing this object" in second, second
    assert "being edited" in client.get("/admin/shop/book/").content.decode()


def _drf(extra: str) -> None:
    from django.contrib.auth.models import Permission, User
    from django.test import Client
    from shop.models import Book

    book = Book.objects.create(name="Dune")
    user = User.objects.create_user("ann", password="pw")
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="shop"))
    client = Client(HTTP_HOST="localhost")  # a host startproject's DEBUG settings allow
    client.force_login(user)
    got = client.get(f"/api/books/{book.pk}/")
    assert got.status_code == 200 and got.headers.get("ETag"), got
    etag = got.headers["ETag"]
    ok = client.patch(
        f"/api/books/{book.pk}/",
        {"name": "Dune II"},
        content_type="application/json",
        headers={"If-Match": etag},
    )
    assert ok.status_code == 200 and ok.headers["ETag"] != etag, ok.content
    stale = client.patch(
        f"/api/books/{book.pk}/",
        {"name": "Dune III"},
        content_type="application/json",
        headers={"If-Match": etag},
    )
    assert stale.status_code == 412, stale.content
    assert client.get("/api/schema/").status_code == 200


def _celery(extra: str) -> None:
    from proj.celery import app

    out = Path("report.json").resolve()
    app.control.purge()  # what an earlier run of this cell left in its queue
    worker = subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "proj", "worker", "--pool=solo",
         "--without-heartbeat", "--without-mingle", "--without-gossip", "-l", "warning"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        from shop.tasks import build_report

        sent = build_report.delay(7, str(out))
        deadline = time.monotonic() + 120
        while not out.exists() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert out.exists(), "the worker ran no task"
        time.sleep(0.2)  # the file's write, to its end
        seen = json.loads(out.read_text())
        assert seen["key"] == "report:7" and seen["id"] == sent.id and seen["fence"] > 0, seen
        assert seen["owner"] == f"celery:{build_report.name}:{sent.id}", seen
    finally:
        worker.terminate()
        log = worker.communicate(timeout=30)[0]
        print(log)
    assert "Traceback" not in log, log


def _tasks(extra: str) -> None:
    from shop.tasks import build_report

    import occupy

    framework = importlib.import_module(f"{FRAMEWORK}.base")
    assert isinstance(build_report, framework.Task), type(build_report).__mro__
    result = build_report.enqueue(account_id=7)
    assert str(result.status) == "SUCCESSFUL", result.errors
    key, fence, owner = result.return_value
    assert key == "report:7" and fence > 0 and owner.endswith(f":{result.id}"), owner
    assert occupy.holder("report:7") is None


def _none(extra: str) -> None:
    _lock(extra)
    _admin(extra)


HOWTOS = {
    "none": _none,
    "drf": _drf,
    "celery": _celery,
    "tasks": _tasks,
    "etcd": lambda extra: None,
}

if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    {"setup": setup, "run": run}[sys.argv[1]](sys.argv[2])
