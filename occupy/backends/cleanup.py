"""The clean-up after a failed acquire, reported beneath the failure it follows.

When an acquire fails (the store refused, timed out, went away), its attempt still has
to remove what it left (its place in the queue, a grant that came too late). If that
clean-up fails too (as it does when the store is gone), the caller must still see the
acquire's own error, with its own cause; the clean-up's error is chained beneath it,
never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["chain_beneath", "clean_up_after"]


def clean_up_after(error: BaseException, clean_up: Callable[[], object]) -> None:
    """Run ``clean_up`` after ``error``; if it fails, chain its error beneath ``error``.

    The clean-up's error becomes the ``__context__`` of the last error in ``error``'s
    chain (the driver's error, usually), so a traceback shows the clean-up's failure
    first, then the acquire's cause, then the acquire's error, which is the one raised.
    The caller re-raises ``error``.
    """
    try:
        clean_up()
    except Exception as failed:
        chain_beneath(error, failed)


def chain_beneath(error: BaseException, failed: BaseException) -> None:
    """Chain ``failed`` (a clean-up's error) beneath ``error`` (see
    :func:`clean_up_after`)."""
    # It happened while ``error`` was being handled: Python made ``error`` its
    # context. Turned round, so that the chain has no cycle.
    if failed.__context__ is error:
        failed.__context__ = None
    last, seen = error, {id(error)}
    while (below := last.__cause__ or last.__context__) is not None:
        if id(below) in seen or below is failed:
            return
        seen.add(id(below))
        last = below
    last.__context__ = failed
