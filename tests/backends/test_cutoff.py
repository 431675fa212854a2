"""The cut-off thread outlives whatever a caller arms, and comes back if it dies; it
shuts a socket down when its cut is due, whichever cuts were armed and disarmed before
it; a disarmed cut never fires."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from occupy.backends.db.cutoff import Cutoffs


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    yield left, right
    left.close()
    right.close()


def _cut(sock: socket.socket) -> bool:
    """Return whether ``sock`` was shut down: a read ends at once instead of waiting."""
    sock.settimeout(30)  # far longer than the cut below; a hang fails the test
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


@pytest.mark.parametrize("far", [1e10, 1e300])
def test_a_cut_too_far_ahead_does_not_kill_the_thread(
    pair: tuple[socket.socket, socket.socket], far: float
) -> None:
    # Before, Condition.wait(1e10) raised OverflowError in the thread, and the next arm
    # did not start another one (its pid was set): no socket was ever cut again.
    cutoffs = Cutoffs()
    left, right = pair
    far_cut = cutoffs.arm(right.fileno(), time.monotonic() + far)
    time.sleep(0.1)  # the thread waits for the far cut now
    assert cutoffs._thread is not None and cutoffs._thread.is_alive()
    cutoffs.arm(left.fileno(), time.monotonic() + 0.05)
    assert _cut(left)
    assert cutoffs._thread.is_alive()
    assert not cutoffs.disarm(far_cut)


def test_a_thread_that_died_is_started_again(pair: tuple[socket.socket, socket.socket]) -> None:
    cutoffs = Cutoffs()
    left, right = pair
    cutoffs.disarm(cutoffs.arm(right.fileno(), time.monotonic() + 60))
    # A thread that ended, as one would on an unforeseen error.
    with cutoffs._cond:
        cutoffs._thread = threading.Thread(target=lambda: None)
        cutoffs._thread.start()
    cutoffs._thread.join()
    cutoffs.arm(left.fileno(), time.monotonic() + 0.05)
    assert cutoffs._thread is not None and cutoffs._thread.is_alive()
    assert _cut(left)


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
