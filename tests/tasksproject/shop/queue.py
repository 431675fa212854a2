"""A task queue in this process's memory that looks results up by id and runs what is
due when asked, as a worker of a real queue backend would (task_started, the call,
task_finished). Django's DummyBackend keeps results but does not run them."""

from __future__ import annotations

import importlib
from typing import Any

from django.conf import settings
from django.utils import timezone

_framework = settings.FRAMEWORK
DummyBackend = importlib.import_module(f"{_framework}.backends.dummy").DummyBackend
_base = importlib.import_module(f"{_framework}.base")
_signals = importlib.import_module(f"{_framework}.signals")


class MemoryQueueBackend(DummyBackend):
    """Results kept in this process, looked up by id; :meth:`work` runs the due ones."""

    supports_get_result = True

    def work(self) -> int:
        """Run every ready result whose ``run_after`` has come; return how many ran."""
        ran = 0
        for result in list(self.results):
            due = result.task.run_after is None or result.task.run_after <= timezone.now()
            if result.status != _base.TaskResultStatus.READY or not due:
                continue
            self._run(result)
            ran += 1
        return ran

    def _run(self, result: Any) -> None:
        object.__setattr__(result, "status", _base.TaskResultStatus.RUNNING)
        _signals.task_started.send(type(self), task_result=result)
        try:
            value = result.task.call(*result.args, **result.kwargs)
        except Exception:
            object.__setattr__(result, "status", _base.TaskResultStatus.FAILED)
        else:
            object.__setattr__(result, "_return_value", value)
            object.__setattr__(result, "status", _base.TaskResultStatus.SUCCESSFUL)
        _signals.task_finished.send(type(self), task_result=result)
