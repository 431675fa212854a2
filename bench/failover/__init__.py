"""Redis Sentinel failovers, measured: ``python -m bench failover`` (part of ``make bench``).

A primary, two replicas and three sentinels of the run's own (:mod:`.deployment`) on
ports of ``OCCUPY_TEST_PORTS``; workers in several processes take locks through
django-redis's Sentinel client and make fenced writes to PostgreSQL while the primary
is failed over again and again (:mod:`.run`). The table compares the backend's replica
options: none, ``MIN_REPLICAS = 1``, and ``MIN_REPLICAS = 1`` with ``REPLICAS = 1``;
then the cost of ``REPLICAS = 1`` in uncontended acquire latency, as a ratio.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """Run the comparison (``--rounds N``: failover cycles per configuration, default 3)."""
    from bench.failover.report import main as report

    report(argv or [])
