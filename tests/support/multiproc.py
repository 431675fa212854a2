"""Run test workers in several OS processes against the test databases.

The processes are forked by a fork server (never from the pytest process, whose
connections and threads a fork would copy): a fresh interpreter that set Django up once
(:mod:`.forkserver_preload`), so a worker starts in milliseconds instead of importing
Django, DRF and occupy again. Each child sets Django up with the suite's settings (a
no-op once the fork server did), points every alias at the test database the parent
created, waits on a barrier so all start together, runs the worker and sends its result
back. The fork server's environment is the pytest process's when the first worker
started: a variable set later is not seen by the workers.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections

_ctx = multiprocessing.get_context("forkserver")
_ctx.set_forkserver_preload(["tests.support.forkserver_preload"])


def _child(
    target: Callable[..., Any],
    args: tuple[Any, ...],
    names: dict[str, str],
    barrier: Any,
    results: Any,
    index: int,
) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.db import connections as child_connections

    for alias, name in names.items():
        child_connections.settings[alias]["NAME"] = name
    try:
        barrier.wait(timeout=60)
        results.put((index, "ok", target(*args)))
    except BaseException as e:  # sent to the parent, which fails the test with it
        results.put((index, "error", f"{e!r}\n{traceback.format_exc()}"))


class Workers:
    """Started worker processes, with what must outlive their start (the barrier)."""

    def __init__(self, procs: list[Any], results: Any, barrier: Any) -> None:
        self.procs = procs
        self.results = results
        self.barrier = barrier  # referenced until collected: children unpickle it late


def start(target: Callable[..., Any], args_list: Sequence[tuple[Any, ...]]) -> Workers:
    """Start one process per argument tuple, all released together by a barrier."""
    names = {alias: connections[alias].settings_dict["NAME"] for alias in connections}
    barrier = _ctx.Barrier(len(args_list))
    results = _ctx.Queue()
    procs = [
        _ctx.Process(target=_child, args=(target, args, names, barrier, results, i))
        for i, args in enumerate(args_list)
    ]
    for proc in procs:
        # Process.start() drops its args, and a spawn-context semaphore is unlinked when
        # its last reference goes: keep the barrier alive until every child has it.
        proc.barrier = barrier  # type: ignore[attr-defined]
        proc.start()
    return Workers(procs, results, barrier)


def collect(workers: Workers, timeout: float = 240) -> list[Any]:
    """Wait for every process's result (in start order); raise if any worker failed or
    died without answering."""
    procs, results = workers.procs, workers.results
    out: dict[int, Any] = {}
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    while len(out) + len(errors) < len(procs):
        try:
            index, status, value = results.get(timeout=0.5)
        except queue.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                for proc in procs:
                    proc.kill()
                raise AssertionError(
                    f"workers died or hung (exit codes {[p.exitcode for p in procs]}); "
                    f"errors so far: {errors}"
                ) from None
            continue
        if status == "ok":
            out[index] = value
        else:
            errors.append(value)
    for proc in procs:
        proc.join(timeout=30)
    if errors:
        raise AssertionError("worker failed:\n" + "\n".join(errors))
    return [out[i] for i in range(len(procs))]


def run(
    target: Callable[..., Any], args_list: Sequence[tuple[Any, ...]], timeout: float = 240
) -> list[Any]:
    """Run ``target(*args)`` in one process per tuple, all at once; return the results."""
    return collect(start(target, args_list), timeout)
