"""Draw occupy's layers from its imports, as text, into docs/development.md.

The layers are those of the import-linter contract in ``.importlinter`` (top to
bottom); the arrows are the imports grimp (import-linter's graph builder, pinned in
the ``dev`` extra) finds at run time: type-only imports are left out of the picture (the
contract counts them too, so they may not go up a layer or close a circle either).
``--write`` (``make layers``) replaces the picture between its markers;
``--check`` (``make lint``) fails when the page and the imports disagree, or when a
top-level module is in no layer.
"""

from __future__ import annotations

import argparse
import configparser
import re
import sys
import textwrap
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "development.md"
START = "<!-- layers: drawn by `make layers` from the imports; do not edit by hand -->"
END = "<!-- layers: end -->"
WIDTH = 88


def layers() -> list[list[str]]:
    """Return the layers of ``.importlinter``, top first, each a list of modules."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    text = config["importlinter:contract:layers"]["layers"]
    return [
        [name.strip() for name in re.split(r"[|:]", line) if name.strip()]
        for line in text.strip().splitlines()
    ]


def _top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def picture() -> str:
    """Return the layers as text: each top-level module and what of occupy it imports."""
    rows = layers()
    layer_of = {name: i for i, row in enumerate(rows) for name in row}
    graph = grimp.build_graph("occupy", exclude_type_checking_imports=True)
    unplaced = sorted({_top(m) for m in graph.modules if m != "occupy"} - set(layer_of))
    if unplaced:
        raise SystemExit(f"in no layer of .importlinter: {', '.join(unplaced)}")
    imports: dict[str, set[str]] = {name: set() for name in layer_of}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            source, target = _top(module), _top(imported)
            if module != "occupy" and target not in (source, "occupy"):
                imports[source].add(target)
    width = max(len(name) for name in layer_of) - len("occupy.")
    lines = ["occupy, top layer first: each module and the modules of occupy it imports"]
    for row in rows:
        lines.append("─" * WIDTH)
        for name in row:
            targets = sorted(imports[name], key=lambda t: (layer_of[t], t))
            upward = [t for t in targets if layer_of[t] <= layer_of[name]]
            arrows = ", ".join(t.removeprefix("occupy.") for t in targets) or "·"
            if upward:  # the contract forbids it; drawn so that it shows
                arrows += f"   ‼ imports upward or sideways: {', '.join(upward)}"
            lines += textwrap.wrap(
                arrows,
                WIDTH,
                initial_indent=f"{name.removeprefix('occupy.'):<{width}} → ",
                subsequent_indent=" " * (width + 3),
                break_on_hyphens=False,
            )
    lines.append("─" * WIDTH)
    return "\n".join(lines)


def page(text: str) -> str:
    """Return ``text`` (docs/development.md) with the picture between its markers."""
    start, end = text.index(START) + len(START), text.index(END)
    return f"{text[:start]}\n```text\n{picture()}\n```\n{text[end:]}"


def main() -> int:
    """Write or check the picture; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="redraw the picture")
    mode.add_argument("--check", action="store_true", help="fail if it is not as drawn")
    write = parser.parse_args().write
    text = DOC.read_text()
    drawn = page(text)
    if write:
        DOC.write_text(drawn)
        return 0
    if drawn != text:
        print(
            "docs/development.md: the layers picture does not match the imports; "
            "run `make layers` and commit the page.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
