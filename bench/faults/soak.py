"""One store's soak: its workers, the faults injected while they run, and the tally.

The coordinator starts the workers (each a process group of its own), then injects one
fault every ``interval`` seconds, in turn from the store's list, until the time is up:

- ``restart`` / ``crash restart``: the store's server stopped by its own shutdown, or
  killed (``SIGKILL``), and started again on the same data;
- ``kill connections``: ``pg_terminate_backend``, MariaDB ``KILL`` or Redis
  ``CLIENT KILL`` of every worker's connection;
- ``pause holder``: a worker asked (``SIGUSR1``) to stop itself right after its fenced
  read; the coordinator continues it (``SIGCONT``) once ``ttl`` + :data:`PAUSE_MARGIN`
  has passed since it stopped;
- ``kill holder``: a worker asked (``SIGUSR2``) to kill itself (``SIGKILL``) right
  after its fenced read, holding its lease; ``kill waiter``: ``SIGKILL`` of a worker
  from outside, which is most often waiting for a key (its place in the queue is left
  behind). Either is replaced by a new worker.

Every wait is bounded; whatever is left of the workers is killed by PID in ``finally``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.faults.analysis import Fault, Tally, tally
from bench.faults.ledger import Ledger
from bench.faults.servers import Server

__all__ = ["PAUSE_MARGIN", "Plan", "Store", "soak"]

#: How long past its ttl a paused holder stays stopped, in seconds.
PAUSE_MARGIN = 0.5
SERVER_FAULTS = (
    "restart",
    "kill holder",
    "kill connections",
    "pause holder",
    "crash restart",
    "kill waiter",
)
LOCAL_FAULTS = ("kill holder", "pause holder", "kill waiter")
#: How long a worker may run past the soak's time if the stop file never came.
WORKER_LIMIT = 120.0
#: How long the workers may take to be set up, in seconds.
READY_WAIT = 120.0
REPO = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Store:
    """A store the soak runs on: its backend alias and the server it lives on."""

    name: str
    server: str | None  # the label of its Server, None for SQLite and files

    @property
    def faults(self) -> tuple[str, ...]:
        """Return the kinds of fault injected on this store, in turn."""
        return SERVER_FAULTS if self.server else LOCAL_FAULTS


@dataclass(frozen=True)
class Plan:
    """How long and how hard one store is soaked."""

    seconds: float
    interval: float
    workers: int = 4
    keys: int = 2
    ttl: float = 1.5
    timeout: float = 3.0
    hold: float = 0.01
    max_sections: int = 200_000
    #: How many workers may be started in all (the first ones and the replacements).
    max_spawns: int = 400
    #: The kinds of fault injected (on a store without a server, those that apply).
    faults: tuple[str, ...] = SERVER_FAULTS


def _state(pid: int) -> str:
    """Return the process state letter (``T``: stopped), or ``""`` when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


class Soak:
    """The coordinator's side of one store's soak."""

    def __init__(
        self,
        store: Store,
        server: Server | None,
        run_dir: Path,
        env: dict[str, str],
        plan: Plan,
        seed: int,
    ) -> None:
        self.store = store
        self.server = server
        self.run_dir = run_dir
        self.env = env
        self.plan = plan
        self.random = random.Random(seed)
        self.keys = [f"faults:{store.name}:{i}" for i in range(plan.keys)]
        self.ledger = Ledger.create(run_dir / f"{store.name}.ledger.sqlite3", self.keys)
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self.spawned = 0
        self.faults: list[Fault] = []
        self.crashed: list[str] = []
        #: Stopped workers: when each was first seen stopped.
        self.stopped: dict[int, float] = {}
        self.deadline = 0.0
        self.stop_file = run_dir / f"{store.name}.stop"
        #: Workers asked to die holding (``kill holder``), and since when.
        self.doomed: dict[int, float] = {}

    def spawn(self) -> None:
        """Start one more worker (it runs until the stop file appears, or at most
        :data:`WORKER_LIMIT` seconds past the soak's time)."""
        seconds = self.plan.seconds + WORKER_LIMIT
        index = self.spawned
        self.spawned += 1
        config = {
            "index": index,
            "alias": self.store.name,
            "keys": self.keys,
            "ttl": self.plan.ttl,
            "timeout": self.plan.timeout,
            "hold": self.plan.hold,
            "seconds": seconds,
            "max_sections": self.plan.max_sections,
            "ledger": str(self.ledger.path),
            "stop_file": str(self.stop_file),
            "ready_file": str(self.ready_file(index)),
        }
        log = (self.run_dir / f"{self.store.name}.worker-{index}.log").open("wb")
        with log:
            self.workers[index] = subprocess.Popen(
                [sys.executable, "-m", "bench.faults.worker"],
                cwd=REPO,
                env={**self.env, "OCCUPY_FAULTS_WORKER": json.dumps(config)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def ready_file(self, index: int) -> Path:
        """Return the file worker ``index`` creates once it is set up."""
        return self.run_dir / f"{self.store.name}.worker-{index}.ready"

    def ready(self) -> list[int]:
        """Return the workers running and set up (only those can take a pause)."""
        return [w for w in self.alive() if w not in self.stopped and self.ready_file(w).exists()]

    def alive(self) -> list[int]:
        """Return the workers still running, noting those that ended by themselves early."""
        for index, process in list(self.workers.items()):
            code = process.poll()
            if code is None:
                continue
            del self.workers[index]
            if index in self.doomed and code == -signal.SIGKILL:
                self.faults.append(
                    Fault(
                        "kill holder",
                        self.doomed.pop(index),
                        time.monotonic(),
                        detail=f"worker {index}",
                    )
                )
                self.replace()
            elif code != 0 and time.monotonic() < self.deadline:
                log = self.run_dir / f"{self.store.name}.worker-{index}.log"
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                self.crashed.append(f"worker {index} exited with {code}: {' | '.join(tail)}")
                self.replace()
        return list(self.workers)

    def replace(self) -> None:
        """Start a worker in place of one that ended, for the rest of the soak."""
        if self.deadline - time.monotonic() > 1 and self.spawned < self.plan.max_spawns:
            self.spawn()

    def tend_pauses(self) -> None:
        """Continue each stopped worker once it has been stopped past the ttl."""
        now = time.monotonic()
        for index in self.alive():
            pid = self.workers[index].pid
            if _state(pid) != "T":
                continue
            since = self.stopped.setdefault(index, now)
            if now - since >= self.plan.ttl + PAUSE_MARGIN:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                del self.stopped[index]
                self.faults.append(Fault("pause holder", since, now, detail=f"worker {index}"))

    def inject(self, kind: str) -> None:
        """Inject one fault of ``kind``."""
        started = time.monotonic()
        detail = ""
        if kind in ("restart", "crash restart"):
            assert self.server is not None
            self.server.restart(graceful=kind == "restart")
        elif kind == "kill connections":
            assert self.server is not None
            detail = f"{self.server.kill_connections()} connections"
        elif kind == "kill waiter":
            workers = [w for w in self.ready() if w not in self.doomed]
            if not workers:
                return
            holding = set(self.ledger.holding())
            victim = self.random.choice([w for w in workers if w not in holding] or workers)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.workers[victim].pid, signal.SIGKILL)
            self.workers.pop(victim).wait(10)
            detail = f"worker {victim}"
            self.replace()
        elif kind in ("pause holder", "kill holder"):
            workers = [w for w in self.ready() if w not in self.doomed]
            if workers:
                victim = self.random.choice(workers)
                if kind == "kill holder":
                    self.doomed[victim] = time.monotonic()
                with contextlib.suppress(ProcessLookupError):
                    os.kill(
                        self.workers[victim].pid,
                        signal.SIGUSR1 if kind == "pause holder" else signal.SIGUSR2,
                    )
            return  # recorded when it has happened (tend_pauses, alive)
        loses = kind in ("restart", "crash restart") and not (self.server and self.server.durable)
        self.faults.append(Fault(kind, started, time.monotonic(), loses_data=loses, detail=detail))

    def run(self) -> Tally:
        """Soak the store; return its tally."""
        plan = self.plan
        self.deadline = time.monotonic() + READY_WAIT + plan.seconds
        try:
            for _ in range(plan.workers):
                self.spawn()
            # The soak's time starts when every worker is set up (Django, drivers).
            while len(self.ready()) < plan.workers and time.monotonic() < self.deadline:
                self.alive()
                time.sleep(0.05)
            started = time.monotonic()
            self.deadline = started + plan.seconds
            # The last faults leave a paused worker time to be continued and to write.
            last_fault = self.deadline - plan.ttl - 2 * PAUSE_MARGIN - 1
            kinds = [k for k in self.store.faults if k in plan.faults]
            turn = 0
            next_fault = started + plan.interval
            while time.monotonic() < self.deadline:
                self.tend_pauses()
                now = time.monotonic()
                if kinds and next_fault <= now < last_fault:
                    self.inject(kinds[turn % len(kinds)])
                    turn += 1
                    next_fault = max(next_fault + plan.interval, time.monotonic())
                time.sleep(0.05)
            # Workers stop at the stop file; a paused one is continued first.
            self.stop_file.touch()
            grace = time.monotonic() + plan.timeout + plan.ttl + 30
            while self.alive() and time.monotonic() < grace:
                self.tend_pauses()
                time.sleep(0.05)
            ended = time.monotonic()
        finally:
            self.stop_workers()
        result = tally(
            self.ledger.sections(),
            self.ledger.records(),
            self.faults,
            ttl=plan.ttl,
            started=started,
            ended=min(ended, self.deadline),
            outcomes=self.ledger.outcomes(),
        )
        for line in self.crashed:
            result.problems.append(f"worker crashed: {line}")
        self.ledger.close()
        return result

    def stop_workers(self) -> None:
        """Kill every worker still running, by its process group, and reap it."""
        for process in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signal.SIGKILL)
        for process in self.workers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        self.workers.clear()


def soak(
    store: Store,
    server: Server | None,
    run_dir: Path,
    env: dict[str, str],
    plan: Plan,
    seed: int = 0,
) -> Tally:
    """Run one store's soak (see the module docstring); return its tally."""
    return Soak(store, server, run_dir, env, plan, seed).run()
