"""Check the built distributions in a directory (``make dist``): one sdist and one wheel
of the version ``occupy/__init__.py`` defines, PEP 639 license metadata, and a wheel
that carries every file of the ``occupy`` package in the checkout (the migrations, the
templates, the static files, the message catalogs, ``py.typed``) and nothing from outside
it.

    python .ci/check_dist.py dist/
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Files every wheel must carry, whatever the checkout holds (a stale checkout would not
#: notice their loss by comparison alone).
REQUIRED = ["occupy/py.typed", "occupy/migrations/__init__.py", "occupy/migrations/0001_initial.py"]
REQUIRED_DIRS = ["occupy/templates/", "occupy/static/", "occupy/locale/"]


def version() -> str:
    """Return ``occupy.__version__`` as the source defines it (without importing it)."""
    tree = ast.parse((ROOT / "occupy" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise SystemExit("occupy/__init__.py defines no __version__")


def package_files() -> set[str]:
    """Return the files of the occupy package that git tracks (else all but caches)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "occupy"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = [
            str(p.relative_to(ROOT))
            for p in (ROOT / "occupy").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ]
    return {name for name in listed if not name.endswith(".pyc")}


def wheel_problems(wheel: Path, expected: str) -> list[str]:
    """Return what the wheel lacks or carries wrongly, its metadata included."""
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(info).decode())
    carried = {n for n in names if n.startswith("occupy/")}
    for name in sorted(package_files() - carried):
        problems.append(f"the wheel lacks {name}")
    for name in REQUIRED:
        if name not in names:
            problems.append(f"the wheel lacks {name}")
    for prefix in REQUIRED_DIRS:
        if not any(n.startswith(prefix) for n in names):
            problems.append(f"the wheel has nothing under {prefix}")
    strays = sorted(n for n in names if not n.startswith(("occupy/", "django_occupy-")))
    if strays:
        problems.append(f"the wheel carries files from outside the package: {strays[:5]}")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append("the wheel lacks its LICENSE file")
    return problems + metadata_problems(metadata, expected)


def metadata_problems(metadata: Message, expected: str) -> list[str]:
    """Return what is wrong in the wheel's METADATA: its version and license fields."""
    problems: list[str] = []
    if metadata["Version"] != expected:
        problems.append(f"METADATA says version {metadata['Version']}, not {expected}")
    if metadata["License-Expression"] != "BSD-3-Clause":
        problems.append(f"License-Expression is {metadata['License-Expression']!r}")
    if metadata.get_all("License-File") != ["LICENSE"]:
        problems.append(f"License-File is {metadata.get_all('License-File')!r}")
    if any(c.startswith("License ::") for c in metadata.get_all("Classifier") or []):
        problems.append("a License classifier beside License-Expression (PEP 639 forbids it)")
    return problems


def main(directory: str) -> list[str]:
    """Return the problems found in ``directory``'s distributions."""
    problems: list[str] = []
    dist = Path(directory)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [
            f"expected one wheel and one sdist in {dist}, found {[p.name for p in wheels + sdists]}"
        ]
    wheel, sdist = wheels[0], sdists[0]
    expected = version()
    for path in (wheel, sdist):
        if f"-{expected}" not in path.name:
            problems.append(f"{path.name} is not version {expected} (occupy.__version__)")

    problems += wheel_problems(wheel, expected)
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[-1] for m in archive.getmembers()}
    for name in ["LICENSE", "README.md", "pyproject.toml", *REQUIRED]:
        if name not in members:
            problems.append(f"the sdist lacks {name}")
    return problems


if __name__ == "__main__":
    found = main(sys.argv[1] if len(sys.argv) > 1 else "dist")
    for problem in found:
        print(f"check_dist: {problem}", file=sys.stderr)
    if found:
        sys.exit(1)
    print("check_dist: the wheel and the sdist carry the package, its data and its license")
