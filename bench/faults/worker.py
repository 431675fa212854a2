"""One worker of the fault soak: ``python -m bench.faults.worker`` (the coordinator runs
it; its settings come in ``OCCUPY_FAULTS_WORKER``, JSON, and the servers' ports in the
variables :mod:`bench.faults.settings` reads).

Until the coordinator's stop file appears (or its own time or count of sections is up):
pick a key, ``occupy.acquire`` it, read the key's counter with the lease's fence, hold a
moment, write the counter + 1 with the fence, ``occupy.release``. Every step's outcome
goes to the ledger; an occupy error is counted by class, any other exception (a
*foreign* one, which occupy should have turned into its own) by its text.

``SIGUSR1`` asks the worker to pause in its next section: right after its fenced read,
it stops itself (``SIGSTOP``) while holding the lease; the coordinator sends ``SIGCONT``
once the ttl has run out, and the write that follows must be refused whenever someone
else took the key meanwhile. ``SIGUSR2`` asks it to die (``SIGKILL``) at the same point,
holding its lease: the key must come free when the ttl runs out.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

#: How often the counts of outcomes go to the ledger, in seconds.
FLUSH_EVERY = 1.0
#: What the coordinator asked for the next section, right after its fenced read:
#: ``SIGUSR1`` a pause, ``SIGUSR2`` death (the handlers are installed before Django is
#: set up, so an early request is kept).
_asked: set[int] = set()


def _ask(signum: int, frame: Any) -> None:
    _asked.add(signum)


class Worker:
    """The loop of one worker process."""

    def __init__(self, config: dict[str, Any]) -> None:
        from bench.faults.ledger import Ledger

        self.index: int = config["index"]
        self.alias: str = config["alias"]
        self.keys: list[str] = config["keys"]
        self.ttl: float = config["ttl"]
        self.timeout: float = config["timeout"]
        self.hold: float = config["hold"]
        self.deadline = time.monotonic() + config["seconds"]
        self.stop_file = Path(config["stop_file"])
        self.max_sections: int = config["max_sections"]
        self.ledger = Ledger(Path(config["ledger"]))
        self.outcomes: Counter[tuple[str, str]] = Counter()
        #: The ledger's sequence number after this worker's last step.
        self.last_seq = 0
        self.random = random.Random(self.index)

    def count(self, kind: str, detail: str = "") -> None:
        """Count one outcome; a foreign exception's text goes to the ledger at once."""
        self.outcomes[kind, detail] += 1
        if kind == "foreign":
            self.flush()

    def flush(self) -> None:
        """Add the outcomes counted since the last flush to the ledger."""
        self.ledger.add_outcomes(self.index, dict(self.outcomes))
        self.outcomes.clear()

    def failed(self, step: str, error: Exception) -> None:
        """Count an exception raised by ``step``: occupy's by class, others by text."""
        from occupy.exceptions import OccupyError, StoreUnavailable

        if isinstance(error, OccupyError):
            self.count(f"{step}: {type(error).__name__}")
        else:
            text = f"{step}: {type(error).__module__}.{type(error).__qualname__}: {error}"
            self.count("foreign", text[:300])
            time.sleep(0.05)  # a store that fails at once is not hammered
        if isinstance(error, StoreUnavailable):
            time.sleep(0.05)

    def run(self) -> None:
        """Run sections until the worker's time or count is up."""
        import occupy

        self.last_seq = self.ledger.now()
        flushed = time.monotonic()
        sections = 0
        while (
            sections < self.max_sections
            and time.monotonic() < self.deadline
            and not self.stop_file.exists()
        ):
            if time.monotonic() - flushed > FLUSH_EVERY:
                self.flush()
                flushed = time.monotonic()
            key = self.random.choice(self.keys)
            called = time.monotonic()
            try:
                lease = occupy.acquire(
                    key,
                    owner=f"worker:{self.index}",
                    ttl=self.ttl,
                    timeout=self.timeout,
                    reentrant=False,
                    backend=self.alias,
                )
            except Exception as e:
                self.failed("acquire", e)
                continue
            sections += 1
            self.section(key, lease.fence, called)
            try:
                occupy.release(lease)
            except Exception as e:
                self.failed("release", e)
        self.flush()

    def section(self, key: str, fence: int, called: float) -> None:
        """Read, hold and write ``key``'s counter with ``fence``."""
        read = self.ledger.read(
            key,
            fence,
            worker=self.index,
            t_call=called,
            t_grant=time.monotonic(),
            after_seq=self.last_seq,
        )
        self.last_seq = read.seq
        if not read.ok:
            return
        if signal.SIGUSR2 in _asked:
            os.kill(os.getpid(), signal.SIGKILL)  # a holder dies holding its lease
        paused = signal.SIGUSR1 in _asked
        if paused:
            _asked.discard(signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGSTOP)  # the coordinator continues it
        time.sleep(self.random.uniform(0, self.hold))
        _accepted, self.last_seq = self.ledger.write(
            read, key, fence, t_write=time.monotonic(), paused=paused
        )


def main() -> None:
    """Set Django up on the soak's settings and run the worker."""
    signal.signal(signal.SIGUSR1, _ask)
    signal.signal(signal.SIGUSR2, _ask)
    config = json.loads(os.environ["OCCUPY_FAULTS_WORKER"])
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.faults.settings"
    import django

    django.setup()
    worker = Worker(config)
    Path(config["ready_file"]).touch()
    worker.run()


if __name__ == "__main__":
    main()
