"""The owner strings occupy's integrations write, and what they tell about a holder.

One home for the format, built and parsed here only:

- ``user:<pk>[:ttl:<seconds>][:client:<id>]``: an **edit lease** a user took through the
  API (``ttl`` is the lease's own length, kept by a renew that names none; ``client``
  the ``Occupy-Client`` header, for a user's several clients);
- ``write:user:<pk>``: the short **write lock** a write without an edit lease holds
  for the length of the write: not somebody editing, and never named to others;
- ``admin:user:<pk>:tab:<id>``: an edit lease of an admin browser tab.

``anonymous`` stands for ``<pk>`` when the request has no user.

The background-task integrations write their own (the section at the end of this module):

- ``celery:<task name>:<task id>`` and ``celery-beat:<host>:<pid>``: Celery tasks
  (:mod:`occupy.celery`) and the beat scheduler that ticks;
- ``task:<task path>:<result id>``: a task of Django's tasks framework (:mod:`occupy.django_tasks`)
  running under its key, or its enqueue-once claim while it waits in the queue
  (``<result id>`` is ``enqueuing`` for the moment of the enqueue itself).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from django.utils.translation import gettext

__all__ = [
    "Owner",
    "TaskOwner",
    "admin_owner",
    "beat_owner",
    "celery_task_owner",
    "lease_owner",
    "owner_display",
    "owner_user_pk",
    "parse_owner",
    "parse_task_owner",
    "same_user",
    "task_owner",
    "write_owner",
]

_WRITE = "write:"
_OWNER = re.compile(
    r"^(?P<write>write:)?(?P<admin>admin:)?user:(?P<pk>[^:]+)"
    r"(?::ttl:(?P<ttl>\d{1,7}(?:\.\d{1,6})?))?(?::tab:(?P<tab>[^:]+))?(?::client:(?P<client>.*))?$"
)
#: The longest client id kept from the ``Occupy-Client`` header.
CLIENT_MAX = 64


@dataclass(frozen=True)
class Owner:
    """What an owner string says: the user (``None`` when it names none), whether it is
    a write lock rather than an edit lease, the lease's own ttl, the client, whether it
    is an admin tab's."""

    user: str | None
    write: bool = False
    ttl: float | None = None
    client: str | None = None
    #: An edit lease of an admin browser tab.
    admin: bool = False

    @property
    def is_edit_lease(self) -> bool:
        """Return whether the owner is a person's edit lease (API or admin)."""
        return self.user is not None and not self.write


def _user(user_pk: object) -> str:
    return "anonymous" if user_pk is None else str(user_pk)


def lease_owner(user_pk: object, *, ttl: float | None = None, client: str | None = None) -> str:
    """Return the owner of an edit lease a user takes through the API."""
    owner = f"user:{_user(user_pk)}"
    if ttl is not None:
        owner += f":ttl:{_seconds(ttl)}"
    if client:
        owner += f":client:{client[:CLIENT_MAX]}"
    return owner


def admin_owner(user_pk: object, tab: str) -> str:
    """Return the owner of an edit lease taken by one admin browser tab."""
    return f"admin:user:{_user(user_pk)}:tab:{tab}"


def write_owner(user_pk: object) -> str:
    """Return the owner of the write lock a write without an edit lease holds."""
    return f"{_WRITE}user:{_user(user_pk)}"


def parse_owner(owner: str) -> Owner:
    """Return what ``owner`` says (an owner occupy did not write names no user)."""
    match = _OWNER.match(owner)
    if match is None:
        return Owner(user=None, write=owner.startswith(_WRITE))
    pk = None if match["pk"] == "anonymous" else match["pk"]
    return Owner(
        user=pk,
        write=bool(match["write"]),
        ttl=None if match["ttl"] is None else float(match["ttl"]),
        client=match["client"],
        admin=bool(match["admin"]),
    )


def owner_display(owner: str) -> str:
    """Return whom clients are told holds an object: the user's full name or username
    for an edit lease, else ``"someone else"`` (a write lock is nobody editing; other
    owners may name a host and process, which are nobody's business)."""
    parsed = parse_owner(owner)
    pk = parsed.user
    if pk is None or parsed.write:
        return gettext("someone else")
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    try:
        user = user_model._default_manager.get(pk=pk)
    except (user_model.DoesNotExist, ValueError, TypeError):
        return gettext("another user")
    return str(user.get_full_name() or user.get_username())


def owner_user_pk(owner: str) -> str | None:
    """Return the primary key of the user whose edit lease ``owner`` is, or ``None``
    (a write lock, or an owner that names no user)."""
    parsed = parse_owner(owner)
    return None if parsed.write else parsed.user


def same_user(owner: str, user_pk: object) -> bool:
    """Return whether ``owner`` is an edit lease or write lock of user ``user_pk``."""
    parsed = parse_owner(owner)
    return parsed.user is not None and user_pk is not None and parsed.user == str(user_pk)


def _seconds(ttl: float) -> str:
    """Return ``ttl`` as the owner writes it: whole seconds without a fraction."""
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}.")
    return str(int(ttl)) if float(ttl).is_integer() else f"{ttl:.6f}".rstrip("0")


# --- Background tasks (occupy.celery, occupy.django_tasks) -----------------------------
#
# ``celery:<task name>:<task id>``: a Celery task's run lock or enqueue claim (the id is
# the one ``AsyncResult`` takes, never containing ``:``; the name may);
# ``task:<task path>:<result id>``: a task of Django's tasks framework, or its
# enqueue-once claim (``<result id>`` is :data:`TASK_ENQUEUING` while the enqueue itself
# is under way); ``celery-beat:<host>:<pid>``: the beat scheduler that ticks.

_TASK_OWNER = re.compile(r"^(?P<runner>celery|task):(?P<name>.+):(?P<id>[^:]+)$")
#: The result id a task's enqueue-once claim names while its enqueue is under way.
TASK_ENQUEUING = "enqueuing"


@dataclass(frozen=True)
class TaskOwner:
    """What a task's owner string says: the task runner (``"celery"``, or ``"task"`` for
    Django's tasks framework), the task's name and its id (Celery's task id, or the
    framework's result id)."""

    runner: str
    name: str
    task_id: str


def celery_task_owner(name: str, task_id: str) -> str:
    """Return the owner of a Celery task's run lock or enqueue claim.

    Raise ``ValueError`` if ``task_id`` contains ``:`` (it could not be read back).
    """
    if not task_id or ":" in task_id:
        raise ValueError(f"A task id must be non-empty and without ':', not {task_id!r}.")
    return f"celery:{name}:{task_id}"


def task_owner(name: str, result_id: object) -> str:
    """Return the owner of a lease a task of Django's tasks framework holds: the task's
    dotted path and the id of its result (the enqueued run), as list_locks and the admin
    show them."""
    if not name or ":" in name:
        raise ValueError(f"a task name is a dotted path without ':', not {name!r}.")
    return f"task:{name}:{result_id}"


def parse_task_owner(owner: str) -> TaskOwner | None:
    """Return what a task's owner string says, or ``None`` if ``owner`` is not one."""
    match = _TASK_OWNER.match(owner)
    if match is None:
        return None
    return TaskOwner(runner=match["runner"], name=match["name"], task_id=match["id"])


def beat_owner(host: str, pid: int) -> str:
    """Return the owner of the lease of the beat scheduler that ticks."""
    return f"celery-beat:{host}:{pid}"
