"""``python -m bench failover [--rounds N]``: the failover run with each replica
configuration side by side, on Sentinel and on Redis Cluster, then the latency cost of
``REPLICAS = 1``.

Each configuration runs ``N`` cycles of the three failovers (Sentinel: ``SENTINEL
FAILOVER``, ``SIGKILL``, ``SIGSTOP``; Cluster: a replica's ``CLUSTER FAILOVER``,
``SIGKILL``, ``SIGSTOP``) on a fresh deployment; the table gives the sums and the
grants lost per hundred failovers. The latency is uncontended acquire + release on
the Sentinel client, rounds alternating between ``REPLICAS`` 0 and 1 (a ratio: the
machine's speed cancels out). Results also go to ``bench/results/failover.txt``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench.common import alternate, occupy_cycle, print_table, setup_django
from bench.failover.cluster import CLUSTER_FAILOVERS
from bench.failover.deployment import FAILOVERS, SentinelDeployment, deployment_missing
from bench.failover.run import Options, Tally, _settings, run_failovers

__all__ = ["CONFIGURATIONS", "main"]

#: name -> (MIN_REPLICAS, REPLICAS)
CONFIGURATIONS = {
    "no guard": (0, 0),
    "MIN_REPLICAS=1": (1, 0),
    "MIN_REPLICAS=1, REPLICAS=1": (1, 1),
}
RESULTS = Path(__file__).resolve().parent.parent / "results" / "failover.txt"


def _line(name: str, tally: Tally) -> str:
    row = tally.row()
    lost_per_100 = 100 * tally.lost / max(tally.failovers, 1)
    return (
        f"| {name} | {row['failovers']} | {row['grants']} | {tally.lost} "
        f"({lost_per_100:.0f} per 100 failovers) | {row['stale accepted']} | "
        f"{row['from replaced primary']} | {row['fences not rising']} | "
        f"{row['longest gap (s)']} | {row['foreign errors']} |"
    )


def _latency(directory: Path) -> list[Any]:
    from django.test import override_settings

    with SentinelDeployment(directory) as deployment:
        where = {"sentinels": deployment.sentinels}
        off = _settings(Options(database="", min_replicas=1, replicas=0), where)
        on = _settings(Options(database="", min_replicas=1, replicas=1), where)
        off["OCCUPY"]["BACKENDS"]["failover-ack"] = on["OCCUPY"]["BACKENDS"]["failover"]
        with override_settings(**off):
            results = alternate(
                {
                    "REPLICAS=1": occupy_cycle("bench:failover:1", "failover-ack"),
                    "REPLICAS=0": occupy_cycle("bench:failover:0", "failover"),
                },
                ops=500,
                rounds=5,
            )
            from occupy.backends import close_connections

            close_connections()
    return results


def main(argv: list[str]) -> None:
    """Run the comparison; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m bench failover")
    parser.add_argument("--rounds", type=int, default=3, help="failover cycles per run")
    args = parser.parse_args(argv)
    missing = deployment_missing()
    if missing:
        print(f"\n## Redis Sentinel failovers: skipped, {missing}")
        return
    setup_django("postgresql")
    from django.db import connections

    database = connections["postgresql"].settings_dict["NAME"]
    lines = [
        "| configuration | failovers | grants | grants lost | stale writes accepted | "
        "grants from a replaced primary | fences not rising | longest gap (s) | "
        "foreign errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n## Redis Sentinel and Redis Cluster failovers (bench/failover)")
    for kind, failovers in (("sentinel", FAILOVERS), ("cluster", CLUSTER_FAILOVERS)):
        for name, (min_replicas, replicas) in CONFIGURATIONS.items():
            options = Options(
                database=database,
                min_replicas=min_replicas,
                replicas=replicas,
                failovers=failovers * args.rounds,
                kind=kind,
            )
            with tempfile.TemporaryDirectory(prefix="occupy-failover-") as directory:
                tally, _done = run_failovers(Path(directory), options)
            lines.append(_line(f"{kind.capitalize()}, {name}", tally))
            print(lines[-1], f"errors: {dict(tally.errors)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="occupy-failover-") as directory:
        results = _latency(Path(directory))
    print("\n".join(lines))
    print_table(
        "Uncontended acquire + release on the Sentinel client, REPLICAS=1 against 0",
        results,
        reference="REPLICAS=0",
    )
    on, off = results
    ratio = off.rate / on.rate
    lines.append(f"\nacquire + release latency, REPLICAS=1 / REPLICAS=0: {ratio:.2f}x")
    RESULTS.write_text("\n".join(lines) + "\n")
