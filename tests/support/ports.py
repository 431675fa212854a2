"""Spare ports for the servers the tests and the benches start themselves: Redis
servers, sentinels, Redis Cluster nodes and etcd members.

``OCCUPY_TEST_PORTS`` (``"low-high"``) gives a checkout a range of its own, so that
checkouts sharing a machine (CI's two groups) never take each other's ports. In it:

- single servers and cluster nodes take the first free ports from its bottom
  (:func:`spare_ports`); a cluster node's bus port, ``CLUSTER_BUS_OFFSET`` above its
  own, must be free too;
- etcd members take fixed ports at its top (:func:`top_ports`), chosen before any
  server runs: the session's cluster of tests/settings.py the top 6, the failover
  test's the 6 below them, the authentication test's 2 below those (``make bench``'s,
  which runs alone, reuse the same places).

Unset, the system picks free ports, and etcd's are 17600-17699's top ones.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

__all__ = ["CLUSTER_BUS_OFFSET", "is_free", "spare_port", "spare_ports", "top_ports"]

#: Redis Cluster talks to its peers on the port 10,000 above its own, and refuses to
#: start on a port above 55535 (random free ports go up to 60999 on Linux).
CLUSTER_BUS_OFFSET = 10000
#: etcd's range where ``OCCUPY_TEST_PORTS`` is unset.
ETCD_DEFAULT = "17600-17699"


def is_free(port: int) -> bool:
    """Return whether nothing is bound to ``port`` on 127.0.0.1 now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _range(default: str | None) -> tuple[int, int] | None:
    ports = os.environ.get("OCCUPY_TEST_PORTS") or default
    if not ports:
        return None
    low, _, high = ports.partition("-")
    return int(low), int(high or low)


def _candidates() -> Iterator[int]:
    bounds = _range(None)
    if bounds is not None:
        yield from range(bounds[0], bounds[1] + 1)
        return
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        yield port  # closed first: the caller binds it to see that it is free


def spare_ports(count: int, *, cluster: bool = False) -> list[int]:
    """Return ``count`` distinct free ports, from the bottom of ``OCCUPY_TEST_PORTS``
    when it is set, else ones the system picks; for cluster nodes, ones whose bus port
    is valid and free too."""
    found: list[int] = []
    for port in _candidates():
        bus = port + CLUSTER_BUS_OFFSET
        if port in found or not is_free(port):
            continue
        if cluster and (bus > 65535 or not is_free(bus)):
            continue
        found.append(port)
        if len(found) == count:
            return found
    raise AssertionError(
        f"fewer than {count} free port{'s' if count > 1 else ''}"
        f"{' (with free bus ports) for Redis Cluster nodes' if cluster else ''} "
        f"(OCCUPY_TEST_PORTS={os.environ.get('OCCUPY_TEST_PORTS')!r})"
    )


def spare_port(*, cluster: bool = False) -> int:
    """Return one free port, as :func:`spare_ports` does."""
    return spare_ports(1, cluster=cluster)[0]


def top_ports(count: int, below: int = 0) -> int:
    """Return the first of ``count`` consecutive ports at the top of
    ``OCCUPY_TEST_PORTS`` (default 17600-17699), ``below`` ports under its top."""
    bounds = _range(ETCD_DEFAULT)
    assert bounds is not None
    low, high = bounds
    port = high - below - count + 1
    if port < low:
        raise RuntimeError(f"OCCUPY_TEST_PORTS={low}-{high} has no {count + below} ports.")
    return port
