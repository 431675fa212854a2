"""Run every benchmark: ``python -m bench`` (``make bench``), or some: ``python -m bench db``.

``python -m bench scale [options]`` runs the scale benchmarks (``make bench-scale``),
which are not part of ``make bench``: see :mod:`bench.scale` for their options.
"""

from __future__ import annotations

import importlib
import sys

#: Benchmark modules in the order they run; each has a ``main()``.
MODULES = ["db", "redis", "cache", "file", "models", "http", "http_contended"]


def main(argv: list[str]) -> None:
    """Run the benchmark modules named in ``argv`` (default: all)."""
    if argv[:1] == ["scale"]:
        importlib.import_module("bench.scale").main(argv[1:])
        return
    for name in argv or MODULES:
        importlib.import_module(f"bench.{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
