"""Run every benchmark: ``python -m bench`` (``make bench``), or some: ``python -m bench db``.

``python -m bench http --instructions`` counts instructions per request instead of
timing requests (:mod:`bench.http_instructions`; ``make bench`` runs it after the rest).
``python -m bench scale [options]`` runs the scale benchmarks (``make bench-scale``), and
``python -m bench faults [options]`` the fault soak (``make faults``); neither is part
of ``make bench``: see :mod:`bench.scale` and :mod:`bench.faults` for their options.
``python -m bench failover [--rounds N]`` runs the failover comparison alone (``make
bench`` runs it with the default rounds), ``python -m bench telemetry [--quick] [--draw
PATH]`` the telemetry costs alone. No benchmark writes into ``docs/``: the telemetry
how-to's picture is drawn only when asked, with ``--draw``.
"""

from __future__ import annotations

import importlib
import sys

#: Benchmark modules in the order they run; each has a ``main()``.
MODULES = [
    "db",
    "redis",
    "etcd",
    "cache",
    "file",
    "models",
    "telemetry",
    "sessions",
    "http",
    "http_contended",
    "tasks",
    "failover",
]


def main(argv: list[str]) -> None:
    """Run the benchmark modules named in ``argv`` (default: all)."""
    if argv[:1] in (["scale"], ["faults"], ["failover"], ["telemetry"]):
        importlib.import_module(f"bench.{argv[0]}").main(argv[1:])
        return
    if argv[:2] == ["http", "--instructions"]:
        importlib.import_module("bench.http_instructions").main(argv[2:])
        return
    unknown = [name for name in argv if name not in MODULES]
    if unknown:
        sys.exit(
            f"{__doc__}\nbench: unknown benchmark {unknown[0]!r}; the benchmarks are "
            f"{', '.join(MODULES)}, scale and faults."
        )
    for name in argv or MODULES:
        importlib.import_module(f"bench.{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
