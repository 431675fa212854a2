"""Fail on a module of the ``occupy`` package over 400 lines (STYLE.md: one role per
module; past 400 lines a module is usually two).

The spec is the exception: the one base class every backend implements stays one class
in one file, as Django's ``SessionBase`` does. A module in ``PENDING`` is over the limit
with a split under way elsewhere; once it is gone or back under the limit this check
fails until its line is removed, so that the list never outlives its reason.

``.ci/module_size.py [ROOT]`` (``make lint``): ROOT is the checkout (default: this one).
"""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT = 400
SPEC = frozenset({"occupy/backends/base.py"})
PENDING: dict[str, str] = {}


def problems(root: Path) -> list[str]:
    """Return a line for each module under ``root/occupy`` over :data:`LIMIT` lines, and
    for each :data:`PENDING` entry that no longer needs to be there."""
    found = []
    sizes = {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted((root / "occupy").rglob("*.py"))
    }
    for name, lines in sizes.items():
        if lines > LIMIT and name not in SPEC and name not in PENDING:
            found.append(f"{name}: {lines} lines, more than {LIMIT}: split it by role")
    for name in PENDING:
        if sizes.get(name, 0) <= LIMIT:
            found.append(f"{name} is no longer over {LIMIT} lines: remove it from PENDING")
    return found


def main(argv: list[str]) -> int:
    """Print each problem; return 1 if there was one."""
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    found = problems(root)
    for line in found:
        print(f"module size: {line} (.ci/module_size.py)", file=sys.stderr)
    return int(bool(found))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
