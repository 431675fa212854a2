"""The how-tos a cell of the clean-install matrix runs (.ci/clean_install_cell.py ``run``),
as the docs write them, in the project that cell set up; each a function of the cell's
extra, in :data:`HOWTOS` (an extra without one takes a lock on the database).
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


#: The key of the etcd page's example, and what another process sees of its holder.
INVOICE = "invoice:run"
SEE_HOLDER = f"""
import json, occupy
held = occupy.holder("{INVOICE}", backend="etcd")
print(json.dumps(held and {{"owner": held.owner, "fence": held.fence}}))
"""


def _etcd(extra: str) -> None:
    """The etcd backend's page (docs/backends/etcd.md), on the member the driver started:
    ``check --database default`` reads the cluster without a warning; the lock of its
    example is held in etcd (another process sees its owner and fence), gone after the
    block, and the next grant's fence is higher."""
    import occupy

    _manage("check", "--database", "default", "--fail-level", "WARNING")
    with occupy.lock(INVOICE, ttl=30, timeout=5, backend="etcd") as lease:
        seen = json.loads(_manage("shell", "-c", SEE_HOLDER).splitlines()[-1])
        assert seen == {"owner": lease.owner, "fence": lease.fence}, (seen, lease)
        assert lease.fence > 0, lease
    assert occupy.holder(INVOICE, backend="etcd") is None
    with occupy.lock(INVOICE, ttl=30, timeout=5, backend="etcd") as second:
        held = occupy.holder(INVOICE, backend="etcd")
        assert held is not None and held.fence == second.fence > lease.fence, (held, lease)
    assert occupy.holder(INVOICE, backend="etcd") is None


def _manage(*args: str) -> str:
    """Run ``manage.py`` with ``args`` in a process of its own, as a user would; print
    its output for the cell's log, fail unless it exits 0, return its standard output."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args], capture_output=True, text=True, timeout=60
    )
    output = done.stdout + done.stderr
    print(f"$ manage.py {' '.join(args)}\n{output}")
    assert done.returncode == 0, f"manage.py {args[0]}: exit {done.returncode}"
    return done.stdout


HOWTOS = {
    "none": _none,
    "drf": _drf,
    "celery": _celery,
    "tasks": _tasks,
    "etcd": _etcd,
}


def run_howto(howto: str, extra: str) -> None:
    """Run ``howto`` in the cell of ``extra``: its runner, or a lock on the database."""
    HOWTOS.get(howto, _lock)(extra)
