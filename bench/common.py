"""What every benchmark shares: Django set-up, the options that pick among names,
alternating rounds, and the report table.

Figures are rates from the median of several rounds; the candidates' rounds alternate
(A, B, C, A, B, C, …) so that a noisy neighbour slows every candidate alike. A ratio is
the median of the round-by-round ratios to the reference (each against the reference's
round next to it), so a machine that speeds up or slows down between rounds moves both
sides of a ratio together; its spread is printed beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

__all__ = ["Result", "alternate", "choose", "occupy_cycle", "print_table", "setup_django"]


def setup_django(database: str = "postgresql") -> None:
    """Set Django up with the test settings, on the real (non-test) ``occupy`` databases,
    with the ``default`` database being ``database``; migrate it."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("OCCUPY_TEST_DB", database)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    for alias in connections:
        call_command("migrate", database=alias, verbosity=0)


def choose(
    parser: argparse.ArgumentParser,
    option: str,
    value: str,
    names: Sequence[str],
    aliases: Mapping[str, str] | None = None,
) -> list[str]:
    """Return the names the comma-separated ``value`` of ``option`` picks, in the order
    given, each alias read as the name it stands for (empty: none given).

    A name that is neither is an error, never a silent empty pick: exit through
    ``parser.error`` naming it and every name ``option`` takes.
    """
    aliases = aliases or {}
    given = [v.strip().lower() for v in value.split(",") if v.strip()]
    unknown = [v for v in given if aliases.get(v, v) not in names]
    if unknown:
        also = f" (or {', '.join(sorted(aliases))})" if aliases else ""
        parser.error(
            f"{option}: unknown {', '.join(map(repr, unknown))}; "
            f"the names are {', '.join(names)}{also}"
        )
    return list(dict.fromkeys(aliases.get(v, v) for v in given))


def occupy_cycle(key: str, alias: str, ttl: float = 60) -> Callable[[int], None]:
    """Return ``fn(n)``: ``occupy.acquire`` then ``occupy.release`` of ``key`` on the
    backend ``alias``, ``n`` times, uncontended, through the public API."""
    import occupy

    def run(n: int) -> None:
        acquire, release = occupy.acquire, occupy.release
        for _ in range(n):
            release(acquire(key, owner="bench", ttl=ttl, timeout=0, backend=alias))

    return run


class Result:
    """The rate of one candidate: operations per second, from the median round."""

    def __init__(self, name: str, rates: list[float], unit: str = "ops/s") -> None:
        self.name = name
        self.rates = rates
        self.unit = unit

    @property
    def rate(self) -> float:
        """Return the median rate."""
        return statistics.median(self.rates)

    def ratios(self, reference: Result) -> list[float]:
        """Return this result's ratios to ``reference``, round by round when they ran
        in the same rounds, else the one ratio of their medians."""
        if len(self.rates) != len(reference.rates):
            return [self.rate / reference.rate]
        return [mine / theirs for mine, theirs in zip(self.rates, reference.rates, strict=True)]

    def ratio(self, reference: Result) -> float:
        """Return the median of :meth:`ratios`."""
        return statistics.median(self.ratios(reference))


def alternate(
    candidates: dict[str, Callable[[int], None]],
    *,
    ops: int,
    rounds: int = 5,
    warmup: int = 50,
) -> list[Result]:
    """Time ``fn(ops)`` for each candidate, rounds alternating; return their rates."""
    for fn in candidates.values():
        fn(warmup)
    rates: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            started = time.perf_counter()
            fn(ops)
            rates[name].append(ops / (time.perf_counter() - started))
    return [Result(name, rates[name]) for name in candidates]


def print_table(
    title: str, results: list[Result], *, reference: str | None = None, target: str = ""
) -> None:
    """Print results with their ratio to ``reference`` (default: the last result)."""
    ref = next((r for r in results if r.name == reference), results[-1])
    print(f"\n## {title}")
    if target:
        print(f"target: {target}")
    width = max(len(r.name) for r in results)
    for r in results:
        spread = f"{min(r.rates):,.0f}–{max(r.rates):,.0f}"
        ratios = r.ratios(ref)
        ratio_spread = f" ({min(ratios):.2f}–{max(ratios):.2f})" if len(ratios) > 1 else ""
        print(
            f"  {r.name.ljust(width)}  {r.rate:>10,.0f} {r.unit}  "
            f"({spread})  {r.ratio(ref):5.2f}×{ratio_spread} {ref.name}"
        )
