"""A pool of spawned worker processes, each with worker threads, for the parts that need
many clients (hand-off under a queue, many keys).

Worker ``g`` (0, 1, 2, …) is thread ``g // processes`` of process ``g % processes``, so
the first workers of a task are spread over the processes. Threads live as long as the
pool, so each keeps the connections its backends open for it (a database backend's
connection is per thread); after each task every process closes its backends'
connections, so that the pool holds no server connections between tasks.

Each process counts, while a task runs, the calls its workers make to their store
(:func:`count_calls`): database statements, Redis commands, and the file backend's
locked steps; each attempt's tries (``try_acquire``), which is what a wake-up or a
poll costs a waiter; and the grants a waiter found by polling: a try that succeeded
right after a wait that ran its full time (on a store that wakes its waiters, a
wake-up that never came).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

__all__ = ["Pool", "WorkerError", "count_calls"]


class WorkerError(Exception):
    """A job failed in a worker (its error, as text)."""


#: Calls counted in this process while a task runs: ``store`` and ``tries``.
counts: Counter[str] = Counter()
_counts_lock = threading.Lock()


def _count(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        with _counts_lock:
            counts[name] += 1
        return method(*args, **kwargs)

    counted.__wrapped__ = method  # type: ignore[attr-defined]
    return counted


_waited = threading.local()


def _timed_wait(method: Callable[..., Any]) -> Callable[..., Any]:
    def wait(self: Any, seconds: float, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return method(self, seconds, *args, **kwargs)
        finally:
            _waited.full = seconds > 0 and time.monotonic() - started >= 0.9 * seconds

    return wait


def _granted_after(method: Callable[..., Any]) -> Callable[..., Any]:
    def try_acquire(self: Any, *args: Any, **kwargs: Any) -> Any:
        lease = method(self, *args, **kwargs)
        if lease is not None and getattr(_waited, "full", False):
            with _counts_lock:
                counts["polled_grants"] += 1
        _waited.full = False
        return lease

    return try_acquire


def count_calls(aliases: list[str]) -> None:
    """Count, in this process, each store call and each try of the backends ``aliases``."""
    from redis.connection import AbstractConnection

    from occupy.backends import get_backend

    patched: set[tuple[type, str]] = set()

    def patch(cls: type, method: str, name: str) -> None:
        if (cls, method) not in patched and hasattr(cls, method):
            setattr(cls, method, _count(name, getattr(cls, method)))
            patched.add((cls, method))

    patch(AbstractConnection, "send_command", "store")
    for alias in aliases:
        backend = get_backend(alias)
        if hasattr(backend, "execute"):  # the database backend: one statement per call
            patch(type(backend), "execute", "store")
        attempt = type(backend.attempt("scale:probe", "bench", 1.0))
        if hasattr(backend, "locks"):  # the file backend: one locked step per hold,
            patch(type(backend.locks), "hold", "store")
            patch(attempt, "_behind", "store")  # and a waiter's look at its place
        patch(attempt, "try_acquire", "tries")
        if (attempt, "wait") not in patched:
            attempt.wait = _timed_wait(attempt.wait)  # type: ignore[method-assign]
            attempt.try_acquire = _granted_after(attempt.try_acquire)  # type: ignore[method-assign]
            patched.add((attempt, "wait"))


def _process(
    index: int, processes: int, threads: int, tasks: Any, replies: Any, aliases: list[str]
) -> None:
    """Run the tasks the coordinator sends, with ``threads`` worker threads."""
    import django

    django.setup()
    count_calls(aliases)
    inboxes = [queue.Queue[Any]() for _ in range(threads)]
    outbox: queue.Queue[Any] = queue.Queue()

    def work(slot: int) -> None:
        worker = index + slot * processes
        for job, args in iter(inboxes[slot].get, None):
            try:
                outbox.put((worker, job(worker, *args)))
            except Exception as e:  # reported to the coordinator, which stops the run
                # As text: not every exception survives pickling.
                outbox.put((worker, WorkerError(f"{type(e).__name__}: {e}")))

    pool = [threading.Thread(target=work, args=(slot,), daemon=True) for slot in range(threads)]
    for thread in pool:
        thread.start()
    for job, workers, args in iter(tasks.get, None):
        mine = [slot for slot in range(threads) if index + slot * processes < workers]
        with _counts_lock:
            counts.clear()
        for slot in mine:
            inboxes[slot].put((job, args))
        results = dict(outbox.get() for _ in mine)
        with _counts_lock:
            counted = dict(counts)
        _close_connections(aliases)
        replies.put((index, results, counted))
    for inbox in inboxes:
        inbox.put(None)


def _close_connections(aliases: list[str]) -> None:
    from occupy.backends import get_backend

    for alias in aliases:
        get_backend(alias).close()


class Pool:
    """``processes`` spawned processes with ``threads`` worker threads each."""

    def __init__(self, processes: int, threads: int, aliases: list[str]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.processes = processes
        self.size = processes * threads
        self.replies = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(processes)]
        self.procs = [
            ctx.Process(
                target=_process,
                args=(i, processes, threads, self.tasks[i], self.replies, aliases),
                daemon=True,
            )
            for i in range(processes)
        ]
        for proc in self.procs:
            proc.start()

    def run(
        self, job: Callable[..., Any], workers: int, *args: Any, timeout: float = 300
    ) -> tuple[dict[int, Any], Counter[str]]:
        """Run ``job(worker, *args)`` on workers ``0 … workers - 1``; return each
        worker's result and the calls counted meanwhile, summed over processes."""
        if workers > self.size:
            raise ValueError(f"the pool has {self.size} workers, not {workers}")
        busy = min(workers, self.processes)
        for i in range(busy):
            self.tasks[i].put((job, workers, args))
        results: dict[int, Any] = {}
        counted: Counter[str] = Counter()
        for _ in range(busy):
            _index, got, calls = self.replies.get(timeout=timeout)
            results.update(got)
            counted.update(calls)
        for worker, result in results.items():
            if isinstance(result, WorkerError):
                raise RuntimeError(f"worker {worker} failed: {result}")
        return results, counted

    def close(self) -> None:
        """Stop the processes."""
        for inbox in self.tasks:
            inbox.put(None)
        for proc in self.procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()


def start_at(delay: float = 0.3) -> float:
    """Return a common start time ``delay`` from now (``time.monotonic()`` is one clock
    for every process of the host)."""
    return time.monotonic() + delay


def pid() -> int:
    """Return this process's id (a job for tests of the pool)."""
    return os.getpid()
