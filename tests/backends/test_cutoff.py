"""The cut-off thread outlives whatever a caller arms, and comes back if it dies."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from occupy.backends.cutoff import Cutoffs


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
