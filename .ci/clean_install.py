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
  with none (``none``: the how-to says Django 6 needs no extra); the etcd backend
  passes ``check`` (its how-to needs a cluster, which the suite's etcd tests start).

Servers: PostgreSQL, Redis and RabbitMQ on 127.0.0.1, as CI has them. Exit status 1 if
any cell failed; each failed cell's log is printed. README.md and docs/development.md
say how long it takes.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CELL = Path(__file__).resolve().parent / "clean_install_cell.py"
DJANGOS = {"5.2": "Django~=5.2.0", "6.1": "Django~=6.1.0"}
EXTRAS = ["none", "redis", "drf", "celery", "tasks", "etcd", "telemetry", "postgres"]


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


def run_cell(django: str, extra: str, wheel: Path, work: Path) -> tuple[bool, float, str]:
    """Make the cell's venv and project, run its checks; return (passed, seconds, log)."""
    started = time.monotonic()
    cell = work / f"django{django}-{extra}"
    log: list[str] = []

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
        step(python, CELL, "setup", extra, cwd=project, env=env)
        step(python, "manage.py", "check", cwd=project, env=env)
        step(python, CELL, "run", extra, cwd=project, env=env)
        return True, time.monotonic() - started, "\n".join(log)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        log.append(f"FAILED: {e}")
        return False, time.monotonic() - started, "\n".join(log)


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
            failed = []
            for (django, extra), future in futures.items():
                passed, seconds, log = future.result()
                outcome = "ok" if passed else "FAILED"
                print(f"Django {django:4} {extra:10} {outcome:6} {seconds:5.1f} s", flush=True)
                if not passed:
                    failed.append(((django, extra), log))
        for (django, extra), log in failed:
            print(f"\n== Django {django}, extra {extra}: log\n{log[-6000:]}")
        total = time.monotonic() - started
        print(f"\n{len(cells) - len(failed)} passed, {len(failed)} failed in {total:.0f} s")
        return 1 if failed else 0
    finally:
        if args.keep:
            print(f"cells kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
