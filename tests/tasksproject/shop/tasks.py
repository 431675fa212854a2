"""The project's tasks, as the how-to writes them."""

from __future__ import annotations

import os

import occupy
from occupy.django_tasks import current_lease, task

seen: list[tuple[str, int, str | None]] = []


@task(occupy_key="report:{account_id}", occupy_on_busy="skip")
def report(account_id: int) -> int:
    lease = current_lease()
    current = occupy.holder(lease.key)
    seen.append((lease.key, lease.fence, None if current is None else current.owner))
    return account_id


@task(occupy_key="report:{account_id}", occupy_on_busy="raise")
def strict_report(account_id: int) -> int:
    return account_id


@task(occupy_key="digest:{user_id}", occupy_once=30, backend="queue")
def digest(user_id: int) -> int:
    return user_id


@task(occupy_key="digest:{user_id}", occupy_once=30, backend="queue")
def other_digest(user_id: int) -> int:
    return -user_id


@task(
    occupy_key="misrouted:{n}",
    occupy_on_busy="skip",
    occupy_backend=os.environ.get("SHOP_TASK_BACKEND", "default"),
)
def misrouted(n: int) -> None:
    """A task whose occupy_backend the run sets to an alias that is not configured."""


if os.environ.get("SHOP_RETRY_ON_IMMEDIATE"):

    @task(occupy_key="retried:{n}")  # "retry", on a backend without run_after: refused
    def retried(n: int) -> None:
        """A task the how-to's first example would declare on Django's immediate backend."""
