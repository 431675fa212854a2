"""Run the Python snippets of README.md and docs/ in a scratch Django project.

A page's ```` ```python ```` blocks run in order, in one namespace, in a subprocess of
their own (:func:`main`), with ``django.setup()`` on a scratch project: its own
settings module, a SQLite database in a temporary directory, and a scratch app,
``docsapp``, in which every model a snippet defines is registered (the snippet runs as
if it were ``docsapp/models.py``). What a block is decides how it is checked:

- **settings** (it assigns upper-case names only: ``OCCUPY = {…}``, ``CACHES``,
  ``INSTALLED_APPS``): the names are applied to the project (``override_settings``;
  ``...`` in a list stands for what the project already has) and ``manage.py check``
  must report no error with them;
- **models** (it defines a model): the model's table is (re)created as soon as it is
  defined, and after the block ``check`` must report no error and ``makemigrations
  docsapp`` must build a migration;
- anything else is run (top-level ``await`` included).

Every block starts from the names a page of the docs takes for granted, :data:`PRELUDE`
(``occupy``, Django's ``models``, ``admin``, ``F``, DRF's ``serializers``, ``viewsets``
and ``permissions``, and everything ``occupy.models``, ``occupy.admin`` and
``occupy.rest_framework`` export). Anything else a block needs is written in the doc
source, right before the block, in an HTML comment that readers do not see::

    <!-- snippet: setup
    book = Book.objects.create(name="Dune")
    -->

runs that code first, in the page's namespace, and::

    <!-- snippet: skip (two columns of a race, not one program) -->

skips the block, with the reason in parentheses (the test lists skipped blocks).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import textwrap
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PRELUDE", "Block", "blocks_of", "main", "pages"]

ROOT = Path(__file__).resolve().parents[2]

#: What every snippet may use without importing it.
PRELUDE = """
import occupy
from django.contrib import admin
from django.db import models
from django.db.models import F
from rest_framework import permissions, serializers, viewsets
from occupy.models import *
from occupy.admin import *
from occupy.rest_framework import *
"""

_FENCE = re.compile(r"^(\s*)```python\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*snippet:\s*(\w+)(.*)$")


@dataclass
class Block:
    """One ```` ```python ```` block: where it is, its code, and its directive."""

    page: str
    line: int
    code: str
    kind: str = ""  # "", "setup" or "skip"
    argument: str = ""  # the setup code, or the reason for a skip
    outcome: str = ""  # "ran", "skipped" or "failed"
    error: str = ""
    checked: list[str] = field(default_factory=list)


def pages() -> list[Path]:
    """Return README.md and every page of docs/ (not the build, not merge leftovers)."""
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)
    return [ROOT / "README.md", *docs]


def blocks_of(page: Path) -> list[Block]:
    """Return the Python blocks of ``page``, dedented, each with its directive."""
    lines = page.read_text(encoding="utf-8").splitlines()
    name = str(page.relative_to(ROOT))
    found: list[Block] = []
    pending: tuple[str, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line)
        if directive:
            text = [directive.group(2)]
            while "-->" not in text[-1]:
                i += 1
                text.append(lines[i])
            body = "\n".join(text).rsplit("-->", 1)[0]
            kind = directive.group(1)
            if kind == "skip":
                reason = re.fullmatch(r"\s*\((.+)\)\s*", body, re.S)
                if reason is None:
                    raise ValueError(
                        f"{name}:{i + 1}: a skip needs its reason in "
                        "parentheses: <!-- snippet: skip (why) -->"
                    )
                pending = ("skip", " ".join(reason.group(1).split()))
            elif kind == "setup":
                pending = ("setup", textwrap.dedent(body.strip("\n")))
            else:
                raise ValueError(f"{name}:{i + 1}: unknown snippet directive {kind!r}")
        elif (fence := _FENCE.match(line)) is not None:
            indent = fence.group(1)
            start = i + 1
            i = start
            while not re.match(rf"^{re.escape(indent)}```\s*$", lines[i]):
                i += 1
            code = "\n".join(text.removeprefix(indent) for text in lines[start:i])
            kind, argument = pending or ("", "")
            found.append(Block(name, start, code, kind, argument))
            pending = None
        elif line.strip():
            pending = None
        i += 1
    return found


# --- the subprocess ------------------------------------------------------------------
_SETTINGS = """
import os
SECRET_KEY = "snippets"
DEBUG = True
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles",
    "rest_framework", "drf_spectacular", "occupy", "docsapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
ROOT_URLCONF = "scratch_urls"
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": os.path.join(os.path.dirname(__file__), "db.sqlite3")}}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
OCCUPY = {"BACKENDS": {"default": {"BACKEND": "occupy.backends.db.DatabaseBackend"}}}
REDIS_URL = os.environ.get("SNIPPETS_REDIS_URL")
if REDIS_URL:
    CACHES["default"] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": REDIS_URL,
                         "KEY_PREFIX": os.environ["SNIPPETS_PREFIX"]}
    OCCUPY["BACKENDS"]["redis"] = {
        "BACKEND": "occupy.backends.redis.RedisBackend",
        "OPTIONS": {"CACHE": "default", "PREFIX": os.environ["SNIPPETS_PREFIX"] + ":occupy:"},
    }
"""


def _project(directory: Path) -> None:
    """Write the scratch project into ``directory``."""
    (directory / "scratch_settings.py").write_text(_SETTINGS)
    (directory / "scratch_urls.py").write_text(
        "from django.contrib import admin\nfrom django.urls import path\n"
        "urlpatterns = [path('admin/', admin.site.urls)]\n"
    )
    app = directory / "docsapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "models.py").write_text("")


def _is_settings(tree: ast.Module) -> bool:
    names = [t for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
    return (
        bool(tree.body)
        and all(isinstance(node, ast.Assign) for node in tree.body)
        and all(isinstance(t, ast.Name) and t.id.isupper() for t in names)
    )


def _errors_of_check() -> list[str]:
    from django.core import checks

    return [
        f"{m.id}: {m.msg}"
        for m in checks.run_checks(include_deployment_checks=False)
        if m.level >= checks.ERROR
    ]


def _apply_settings(block: Block, code: Any, namespace: dict[str, Any]) -> None:
    """Check a settings block: its names applied to the project, ``check`` passes."""
    from django.conf import settings
    from django.test.utils import override_settings

    from occupy.backends import reset_backends

    values: dict[str, Any] = {}
    exec(code, {"__name__": "scratch_settings"}, values)
    applied = {}
    for name, value in values.items():
        if isinstance(value, list) and ... in value:
            # "[..., 'occupy']": what the project has, plus what the docs add.
            have = list(getattr(settings, name))
            value = have + [v for v in value if v is not ... and v not in have]
        applied[name] = value
    if "INSTALLED_APPS" in applied:
        from django.apps import apps

        missing = [a for a in applied["INSTALLED_APPS"] if not apps.is_installed(a)]
        assert not missing, f"apps the scratch project does not have: {missing}"
        del applied["INSTALLED_APPS"]  # the project already installs them all
    with override_settings(**applied):
        try:
            errors = _errors_of_check()
        finally:
            reset_backends()
    assert not errors, "check with these settings: " + "; ".join(errors)
    block.checked.append("check")
    namespace.update(values)


def _rebuild_table(sender: type[Any], **kwargs: Any) -> None:
    """Give a model a snippet defines its table at once (replacing the table and the
    admin of the model of that name it replaces), so the snippet can use it."""
    from django.apps import apps
    from django.contrib import admin
    from django.db import connection

    meta = sender._meta
    if meta.app_label != "docsapp" or meta.abstract:
        return
    old = apps.all_models["docsapp"].get(meta.model_name)
    if old is not None and admin.site.is_registered(old):
        admin.site.unregister(old)
    # Models that point at the one replaced go with it (a page's Chapter of its Book).
    stale = [old] if old is not None else []
    stale += [
        m
        for m in apps.all_models["docsapp"].values()
        if old is not None
        and m is not old
        and any(f.related_model is old for f in m._meta.get_fields())
    ]
    tables = set(connection.introspection.table_names())
    with connection.schema_editor() as editor:
        for model in stale:
            if model._meta.db_table in tables and not model._meta.proxy:
                editor.delete_model(model)
            if model is not old:
                del apps.all_models["docsapp"][model._meta.model_name]
                if admin.site.is_registered(model):
                    admin.site.unregister(model)
        if meta.managed and not meta.proxy:
            editor.create_model(sender)
    apps.clear_cache()


def _check_models(block: Block, before: dict[str, Any]) -> None:
    """After a block that defined models: ``check`` and ``makemigrations docsapp`` pass."""
    from django.apps import apps
    from django.core.management import call_command

    now = dict(apps.all_models["docsapp"])
    if all(before.get(name) is model for name, model in now.items()):
        return
    errors = _errors_of_check()
    assert not errors, "manage.py check: " + "; ".join(errors)
    out = io.StringIO()
    call_command("makemigrations", "docsapp", dry_run=True, stdout=out, verbosity=1)
    assert "Migrations for 'docsapp'" in out.getvalue(), out.getvalue()
    block.checked += ["check", "makemigrations"]


def _run_block(block: Block, namespace: dict[str, Any]) -> None:
    from django.apps import apps

    before = dict(apps.all_models["docsapp"])
    if block.kind == "setup":
        exec(compile(block.argument, f"{block.page}:{block.line} (setup)", "exec"), namespace)
        _check_models(block, before)
        before = dict(apps.all_models["docsapp"])
    name = f"{block.page}:{block.line}"
    code = compile(block.code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    tree = ast.parse(block.code)
    if _is_settings(tree):
        _apply_settings(block, code, namespace)
        return
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    _check_models(block, before)


def _run_page(page: Path) -> list[Block]:
    import warnings

    from django.db.models.signals import class_prepared

    class_prepared.connect(_rebuild_table)
    namespace: dict[str, Any] = {"__name__": "docsapp.models"}
    exec(PRELUDE, namespace)
    blocks = blocks_of(page)
    for block in blocks:
        if block.kind == "skip":
            block.outcome = "skipped"
            continue
        needs_redis = re.search(r"""backend=["']redis["']|CacheLock""", block.code)
        if needs_redis and not os.environ.get("SNIPPETS_REDIS_URL"):
            block.outcome = "skipped"
            block.argument = "needs Redis, which is not reachable here"
            continue
        try:
            with warnings.catch_warnings():
                # A page redefines a model (its Book grows): Django warns, and we rebuild.
                warnings.filterwarnings("ignore", "Model 'docsapp.", RuntimeWarning)
                _run_block(block, namespace)
            block.outcome = "ran"
        except BaseException:  # reported, with the block's line, by the test
            block.outcome = "failed"
            block.error = traceback.format_exc(limit=-6)
    class_prepared.disconnect(_rebuild_table)
    _forget_models()
    return blocks


def _forget_models() -> None:
    """Drop the tables of the page's models and unregister them (and their admins),
    for the next page."""
    from django.apps import apps
    from django.contrib import admin
    from django.db import connection

    for model in list(admin.site._registry):
        if model._meta.app_label == "docsapp":
            admin.site.unregister(model)
    tables = set(connection.introspection.table_names())
    with connection.schema_editor() as editor:
        for model in apps.all_models["docsapp"].values():
            if model._meta.db_table in tables and not model._meta.proxy:
                editor.delete_model(model)
    apps.all_models["docsapp"].clear()
    apps.clear_cache()


def main() -> None:
    """Run the pages named on the command line; print their blocks as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        _project(directory)
        sys.path.insert(0, tmp)
        os.environ["DJANGO_SETTINGS_MODULE"] = "scratch_settings"
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # top-level await in snippets
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        results = []
        for page in sys.argv[1:]:
            with contextlib.redirect_stdout(io.StringIO()):
                results += [asdict(b) for b in _run_page(ROOT / page)]
        print(json.dumps(results))


if __name__ == "__main__":
    main()
