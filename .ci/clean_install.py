"""The clean-install matrix: occupy as its users install it, from the wheel.

    python .ci/clean_install.py                       # every cell, two at a time
    python .ci/clean_install.py --django 6.1 --extras celery,tasks --jobs 1 --keep

The wheel is built once (``python -m build --wheel``, from a copy of the files git would
commit). Then, for each Django (5.2 LTS on this interpreter, 6.1 on Python 3.12 or
later) and each extra of ``pyproject.toml`` (and none), one cell: a fresh venv with
nothing but the wheel with that extra and that Django (no ``test``/``dev`` extra, not
editable; from the wheels of every extra, downloaded once per Django, so that a cell
does not query the index again), a project made by
``django-admin startproject`` with ``"occupy"`` and what the extra's how-to adds in
``INSTALLED_APPS``, and in it (.ci/clean_install_cell.py, the cell's own processes):

- every public module the docs name imports, or raises an ``ImportError`` naming the
  extra it needs (a backend: ``InvalidBackendError``) when that extra is not installed;
- ``manage.py check`` passes;
- the extra's how-to runs as written: a lock on the database (``none``, ``telemetry``),
  on PostgreSQL (``postgres``) or Redis (``redis``); the admin how-to's change page
  under an edit lease for its first editor, read-only for the next (``none``); the DRF
  how-to's view answers with an ``ETag``, 412 for a stale ``If-Match`` and 200 for the
  current one (``drf``); a Celery worker started with the project's
  ``app.autodiscover_tasks()``, on RabbitMQ, runs one ``OccupyTask`` under its lease
  (``celery``); a task of Django's tasks framework runs under its lease, on 5.2 with
  the backport (``tasks``), on 6.1 with Django's own both with the ``tasks`` extra and
  with none (``none``: the how-to says Django 6 needs no extra); the etcd backend's
  page, on one etcd member the driver starts for the cell: ``check --database
  default`` reads it without a warning, and the page's lock is held in etcd (another
  process sees it, with its fence), released after the block, its next fence higher
  (``etcd``).

Servers: PostgreSQL, Redis and RabbitMQ on 127.0.0.1, as CI has them; the etcd member on
two spare ports of ``OCCUPY_TEST_PORTS`` (tests/support/ports.py), its data in a
temporary directory, stopped when its cell ends. Without the ``etcd`` binary the etcd
cells are skipped, or fail where ``CI=true`` or ``OCCUPY_REQUIRE_SERVERS=1``. Exit status
1 if any cell failed; each failed cell's log is printed. README.md and
docs/development.md say how long it takes.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the etcd member and spare ports of the suite's servers
from tests.support.etcd_cluster import ETCD, EtcdCluster  # noqa: E402
from tests.support.ports import spare_ports  # noqa: E402

CELL = Path(__file__).resolve().parent / "clean_install_cell.py"
DJANGOS = {"5.2": "Django~=5.2.0", "6.1": "Django~=6.1.0"}
EXTRAS = ["none", "redis", "drf", "celery", "tasks", "etcd", "telemetry", "postgres"]
#: Whether a server the driver would start but cannot is a failure rather than a skip.
REQUIRE_SERVERS = (
    os.environ.get("CI", "").lower() == "true" or os.environ.get("OCCUPY_REQUIRE_SERVERS") == "1"
)
#: Held while a cell picks its etcd member's ports and starts it, until the member
#: answers: two cells at a time never pick the same free ports.
ETCD_START = threading.Lock()


def python_for(django: str) -> str:
    """Return an interpreter for ``django``: this one for 5.2; for 6.1 (which needs
    Python 3.12) the newest 3.13 or 3.12 on PATH or among pyenv's versions."""
    if django == "5.2" or sys.version_info >= (3, 12):
        return sys.executable
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for minor in ("3.13", "3.12"):
        found = sorted(glob.glob(f"{pyenv}/versions/{minor}.*/bin/python{minor}"))
        for candidate in [*reversed(found), shutil.which(f"python{minor}")]:
            if (
                candidate
                and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0
            ):
                return candidate
    raise SystemExit("Django 6.1 needs Python 3.12 or 3.13, and neither is installed here.")


def build_wheel(out: Path) -> Path:
    """Build occupy's wheel into ``out`` and return its path, from a copy of the files
    git would commit (tracked, and new ones not ignored): a ``build/`` directory left in
    the checkout by an earlier build would put the modules it kept into the wheel."""
    source = out.parent / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"the wheel did not build:\n{done.stdout}{done.stderr}")
    [wheel] = out.glob("django_occupy-*.whl")
    return wheel


def download(django: str, wheel: Path, into: Path) -> None:
    """Download, once per Django, the wheels of every extra into ``into`` (one
    resolution against the package index, so that each cell installs from disk)."""
    spec = f"{wheel}[{','.join(e for e in EXTRAS if e != 'none')}]"
    done = subprocess.run(
        [python_for(django), "-m", "pip", "download", "-q", "-d", str(into), spec, DJANGOS[django]],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"pip download failed for Django {django}:\n{done.stderr}")


def missing_server(extra: str) -> str | None:
    """Return why the server the cell of ``extra`` starts cannot be started here, or None."""
    if extra == "etcd" and ETCD is None:
        return "the etcd binary is not on PATH (apt-get install etcd-server)"
    return None


@contextlib.contextmanager
def etcd_member(log: list[str]) -> Iterator[str]:
    """Start one etcd member (the suite's :class:`EtcdCluster`) on two spare ports, its
    data in a temporary directory; yield its client URL once it leads; kill it and
    remove its data on leaving, its log added to ``log``."""
    with ETCD_START:
        client, peer = spare_ports(2)
        member = EtcdCluster(1, client, peer_base=peer)
        try:
            member.start()
        except BaseException:
            _stop(member, log)
            raise
    try:
        yield member.endpoints[0]
    finally:
        _stop(member, log)


def _stop(member: EtcdCluster, log: list[str]) -> None:
    """Stop ``member``, its log (errors only) added to ``log`` first."""
    path = member.dir / "m0.log"
    text = path.read_text(errors="replace") if path.exists() else "(not started)\n"
    log.append(f"$ etcd on {member.endpoints[0]}, peer port {member.peer_port(0)}\n{text}")
    member.stop()


@contextlib.contextmanager
def servers(extra: str, log: list[str]) -> Iterator[dict[str, str]]:
    """Start the servers the cell of ``extra`` needs of its own (``etcd``: one member);
    yield what the cell's environment says of them; stop them on leaving."""
    if extra != "etcd":
        yield {}
        return
    with etcd_member(log) as endpoint:
        yield {"CLEAN_ETCD": endpoint}


def run_cell(django: str, extra: str, wheel: Path, work: Path) -> tuple[str, float, str]:
    """Make the cell's venv and project, run its checks; return (outcome: ``ok``,
    ``FAILED`` or ``skipped``, seconds, log: for a skip, why)."""
    started = time.monotonic()
    cell = work / f"django{django}-{extra}"
    log: list[str] = []
    missing = missing_server(extra)
    if missing and not REQUIRE_SERVERS:
        return "skipped", 0.0, missing

    def step(
        *command: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        done = subprocess.run(
            [str(c) for c in command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        output = "".join(
            line
            for line in (done.stdout + done.stderr).splitlines(keepends=True)
            if not line.startswith("WARNING: Location")  # pip's note on a local index
        )
        log.append(f"$ {' '.join(str(c) for c in command)}\n{output}")
        if done.returncode != 0:
            raise RuntimeError(f"exit {done.returncode}")

    try:
        if missing:
            raise RuntimeError(f"{missing}, and CI=true or OCCUPY_REQUIRE_SERVERS=1 needs it")
        venv = cell / "venv"
        step(python_for(django), "-m", "venv", "--without-pip", venv)
        python = venv / "bin" / "python"
        spec = str(wheel) if extra == "none" else f"{wheel}[{extra}]"
        wheels = work / f"wheels-{django}"
        step(
            sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index",
            "--find-links", wheels, spec, DJANGOS[django],
        )  # fmt: skip
        (cell / "project").mkdir()
        step(venv / "bin" / "django-admin", "startproject", "proj", cell / "project")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTHON"))},
            "DJANGO_SETTINGS_MODULE": "proj.settings",
            "CLEAN_CELL": f"django{django.replace('.', '')}_{extra}",
        }
        project = cell / "project"
        with servers(extra, log) as more:
            env.update(more)
            step(python, CELL, "setup", extra, cwd=project, env=env)
            step(python, "manage.py", "check", cwd=project, env=env)
            step(python, CELL, "run", extra, cwd=project, env=env)
        return "ok", time.monotonic() - started, "\n".join(log)
    except (RuntimeError, AssertionError, subprocess.TimeoutExpired) as e:
        log.append(f"FAILED: {e}")
        return "FAILED", time.monotonic() - started, "\n".join(log)


def main() -> int:
    """Run the matrix; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--django", default=",".join(DJANGOS), help="Django versions, e.g. 6.1")
    parser.add_argument("--extras", default=",".join(EXTRAS), help="extras, e.g. celery,tasks")
    parser.add_argument("--jobs", type=int, default=2, help="cells at a time (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the cells' directories")
    args = parser.parse_args()
    djangos = [d for d in args.django.split(",") if d]
    extras = [e for e in args.extras.split(",") if e]
    unknown = sorted({*djangos} - set(DJANGOS)) + sorted({*extras} - set(EXTRAS))
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="occupy-clean-install-"))
    try:
        wheel = build_wheel(work / "dist")
        print(f"built {wheel.name} in {time.monotonic() - started:.0f} s", flush=True)
        with ThreadPoolExecutor(max_workers=len(djangos)) as pool:
            downloads = [pool.submit(download, d, wheel, work / f"wheels-{d}") for d in djangos]
            for done in downloads:
                done.result()
        print(f"downloaded the wheels by {time.monotonic() - started:.0f} s", flush=True)
        cells = [(d, e) for d in djangos for e in extras]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {cell: pool.submit(run_cell, *cell, wheel, work) for cell in cells}
            failed, skipped = [], 0
            for (django, extra), future in futures.items():
                outcome, seconds, log = future.result()
                why = f" ({log})" if outcome == "skipped" else ""
                print(f"Django {django:4} {extra:10} {outcome:7} {seconds:5.1f} s{why}", flush=True)
                skipped += outcome == "skipped"
                if outcome == "FAILED":
                    failed.append(((django, extra), log))
        for (django, extra), log in failed:
            print(f"\n== Django {django}, extra {extra}: log\n{log[-6000:]}")
        total = time.monotonic() - started
        passed = len(cells) - len(failed) - skipped
        print(f"\n{passed} passed, {skipped} skipped, {len(failed)} failed in {total:.0f} s")
        return 1 if failed else 0
    finally:
        if args.keep:
            print(f"cells kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
