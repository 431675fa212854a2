"""The core of occupy's task integrations: one run per key, one enqueue per key.

:mod:`occupy.celery` (Celery) and :mod:`occupy.django_tasks` (Django's tasks framework)
are thin adapters on this module: they read the same options (:class:`TaskOptions`:
``occupy_key``, ``occupy_ttl``, ``occupy_on_busy``, ``occupy_once``,
``occupy_backend``), raise the same errors, and leave every decision about keys,
claims and busy runs to :class:`KeyedTask`. The invariants:

- **Run-exclusion.** A run's body runs only while the run holds a lease on its run key
  (the ``occupy_key`` template formatted with the call's arguments by name, as
  ``@occupy.lock`` formats it: :class:`~occupy.keys.KeyTemplate`), renewed by the
  watchdog while the body runs and released when it returns or raises. A worker that
  dies stops renewing: the key is free again within ``occupy_ttl``. A lease lost while
  the body runs fences the body's fenced writes out, and the run ends with
  :class:`~occupy.LeaseLost`.
- **Busy.** A run that finds its key held runs nothing: ``"retry"`` has the framework
  run the call again after the holder's remaining time, ``"skip"`` returns ``None``
  (logged), ``"raise"`` raises :class:`~occupy.Occupied`.
- **Enqueue-once, per task and key.** An enqueue of a task with ``occupy_once`` claims
  the key :func:`once_key` of its task's name and its run key for the new task; while
  the claim names a task that is queued, waiting for a retry or running, another
  enqueue of the same task and run key returns that task instead of enqueuing one.
  Two different tasks never share a claim, whatever their keys. A queued task's claim
  lives ``occupy_once`` seconds (:data:`ONCE_TTL` for ``True``); the run takes it over,
  renews it with its lease (so a dead worker's claim ends within ``occupy_ttl``) and
  ends it with the run.

The owners these leases carry name the task (:mod:`occupy.owners`), so ``list_locks``
and the admin show which task holds which key. The how-tos: docs/howto/tasks.md
(Celery) and docs/howto/django-tasks.md.
"""

from occupy.taskcore.checks import check_tasks, declared
from occupy.taskcore.keyed import KeyedTask, claimant, current_lease
from occupy.taskcore.options import ON_BUSY, ONCE_PREFIX, ONCE_TTL, TaskOptions, once_key

__all__ = [
    "ONCE_PREFIX",
    "ONCE_TTL",
    "ON_BUSY",
    "KeyedTask",
    "TaskOptions",
    "check_tasks",
    "claimant",
    "current_lease",
    "declared",
    "once_key",
]
