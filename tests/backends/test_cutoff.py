"""The cutoff thread shuts a socket down when its cut is due, whichever cuts were armed
and disarmed before it; a disarmed cut never fires."""

from __future__ import annotations

import socket
import time

from occupy.backends.cutoff import Cutoffs


def _shut_down(sock: socket.socket, within: float = 10.0) -> bool:
    """Return whether the peer of ``sock`` was shut down (EOF) within ``within`` s."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_an_earlier_cut_wakes_the_thread_that_sleeps_until_a_later_one() -> None:
    cutoffs = Cutoffs()
    far_a, far_b = socket.socketpair()
    near_a, near_b = socket.socketpair()
    with far_a, far_b, near_a, near_b:
        far = cutoffs.arm(far_a.fileno(), time.monotonic() + 3600)
        time.sleep(0.05)  # the thread now sleeps until the far cut
        near = cutoffs.arm(near_a.fileno(), time.monotonic() + 0.05)
        assert _shut_down(near_b)
        assert near.done
        assert not cutoffs.disarm(far)


def test_a_stream_of_disarmed_cuts_neither_fires_nor_hides_the_next() -> None:
    cutoffs = Cutoffs()
    kept_a, kept_b = socket.socketpair()
    cut_a, cut_b = socket.socketpair()
    with kept_a, kept_b, cut_a, cut_b:
        for _ in range(2000):  # each disarmed long before it is due, even on a slow machine
            entry = cutoffs.arm(kept_a.fileno(), time.monotonic() + 0.5)
            assert not cutoffs.disarm(entry)
        time.sleep(0.6)  # past every one of them: the thread popped them, fired none
        kept_a.sendall(b"x")
        assert kept_b.recv(1) == b"x"
        entry = cutoffs.arm(cut_a.fileno(), time.monotonic() + 0.05)
        assert _shut_down(cut_b)
        assert entry.done
