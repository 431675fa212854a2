"""The options of a task of occupy's integrations (:class:`TaskOptions`), as both spell
them (``occupy_<name>``), and the key of an enqueue-once claim (:func:`once_key`)."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.checks import CheckMessage, Error

from occupy.conf import occupy_settings
from occupy.keys import fit
from occupy.validation import duration_problem

__all__ = ["ONCE_PREFIX", "ONCE_TTL", "ON_BUSY", "TaskOptions", "once_key"]

#: What ``occupy_on_busy`` may say.
ON_BUSY = ("retry", "skip", "raise")
#: The prefix of every enqueue-once claim's key.
ONCE_PREFIX = "once:"
#: How long an enqueue-once claim lives while its task waits in the queue, for
#: ``occupy_once=True`` (seconds).
ONCE_TTL = 3600.0


def once_key(task: str, run_key: str) -> str:
    """Return the key of the enqueue-once claim of task ``task`` for its run key
    ``run_key``: ``once:<task>:<run key>``, shortened (:func:`occupy.keys.fit`) to
    :data:`~occupy.validation.MAX_KEY_LENGTH` characters when longer, so that it is a
    valid key for every valid run key and every task name."""
    return fit(ONCE_PREFIX, f"{task}:{run_key}")


@dataclass(frozen=True)
class TaskOptions:
    """A task's occupy options, as both integrations spell them (``occupy_<name>``).

    ``task`` is the task's name as owners, once-keys and errors give it (Celery's task
    name; the framework's dotted path of the function).
    """

    task: str
    key: str | None
    ttl: float | None = None
    on_busy: str = "retry"
    once: bool | float = False
    backend: str = "default"

    def problems(self) -> list[CheckMessage]:
        """Return the check errors of the options whose value is wrong, whatever the
        settings (the backend alias is :func:`check_tasks`'s)."""
        out: list[CheckMessage] = []
        if self.ttl is not None and (why := duration_problem(self.ttl)) is not None:
            out.append(
                Error(
                    f"task {self.task}: occupy_ttl {why}.",
                    hint="Give occupy_ttl in seconds (how long a dead worker keeps the key), "
                    "or None for OCCUPY['TTL'].",
                    obj=self.task,
                    id="occupy.E402",
                )
            )
        if self.on_busy not in ON_BUSY:
            out.append(
                Error(
                    f"task {self.task}: occupy_on_busy must be one of {', '.join(ON_BUSY)}, "
                    f"not {self.on_busy!r}.",
                    hint="Say what a run does when another run holds its key.",
                    obj=self.task,
                    id="occupy.E403",
                )
            )
        once = self.once
        why = None if once is False or once is True else duration_problem(once)
        if why is not None or (once is not False and self.key is None):
            out.append(
                Error(
                    f"task {self.task}: occupy_once {why}."
                    if why is not None
                    else f"task {self.task}: occupy_once needs an occupy_key.",
                    hint="Give occupy_once False, True, or the seconds a queued task's claim "
                    "lives, and an occupy_key.",
                    obj=self.task,
                    id="occupy.E404",
                )
            )
        return out

    def validate(self) -> None:
        """Raise ``ValueError`` with the first of :meth:`problems`, if any."""
        problems = self.problems()
        if problems:
            raise ValueError(problems[0].msg)

    @property
    def lease_ttl(self) -> float:
        """Return the seconds a run's lease lives unless renewed."""
        return float(occupy_settings.TTL if self.ttl is None else self.ttl)

    @property
    def once_ttl(self) -> float:
        """Return the seconds an enqueue-once claim lives while its task is queued."""
        return ONCE_TTL if self.once is True else float(self.once)
