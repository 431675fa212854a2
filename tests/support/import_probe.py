"""Import every module of occupy with some packages hidden, as in a project without an
extra: ``python -m tests.support.import_probe PACKAGE[,PACKAGE...]`` prints one line per
module whose import failed (``module<TAB>error class<TAB>message``), then ``done``.

A package is hidden by a finder first on ``sys.meta_path`` that refuses it (a dotted
name hides that module and those under it: ``django.tasks`` is Django 5.2's lack of the
tasks framework). Then Celery's autodiscovery of ``<app>.tasks`` runs for every
installed app, as a worker's does, where Celery is not hidden.
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import pkgutil
import sys
from typing import Any


class Hide(importlib.abc.MetaPathFinder):
    """Refuse the modules of the hidden packages, as if they were not installed."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        for name in self.names:
            if fullname == name or fullname.startswith(name + "."):
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


SETTINGS = {
    "SECRET_KEY": "probe",
    "INSTALLED_APPS": [
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "django.contrib.admin",
        "occupy",
    ],
    "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    "USE_TZ": True,
}


def main(hidden: list[str]) -> None:
    """Import every module of occupy with ``hidden`` hidden; print the failures."""
    sys.meta_path.insert(0, Hide(hidden))
    os.environ.pop("DJANGO_SETTINGS_MODULE", None)
    import django
    from django.conf import settings

    settings.configure(**SETTINGS)
    django.setup()
    import occupy

    for info in pkgutil.walk_packages(occupy.__path__, "occupy.", onerror=lambda name: None):
        if ".migrations." in info.name:
            continue
        try:
            importlib.import_module(info.name)
        except Exception as e:  # every failure is reported, whatever it is
            print(f"{info.name}\t{type(e).__name__}\t{e}".replace("\n", " "))
    try:
        import celery
    except ImportError:
        pass
    else:
        app = celery.Celery("probe", broker="memory://", set_as_current=False)
        try:
            app.autodiscover_tasks(lambda: list(settings.INSTALLED_APPS), force=True)
        except Exception as e:  # as a worker would die of it
            print(f"celery autodiscovery\t{type(e).__name__}\t{e}".replace("\n", " "))
    print("done")


if __name__ == "__main__":
    main([name for name in sys.argv[1].split(",") if name])
