"""Using the database backend before ``migrate`` created its table says what to run.

Every entry point (acquire, holder, release) raises ``StoreNotMigrated``, a
``StoreUnavailable``, naming the ``migrate`` command for the backend's database, instead
of the driver's bare "no such table"; ``sweep_locks`` and ``list_locks`` say the same in
a ``CommandError``. The table is dropped
and created again here as ``tests/test_checks.py`` does for W001.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connections
from django.db.migrations.recorder import MigrationRecorder

import occupy
from occupy.backends import get_backend
from occupy.exceptions import StoreNotMigrated, StoreUnavailable
from occupy.leases import Lease
from tests.support.aliases import DATABASE_BACKENDS, backend_params


@pytest.fixture(params=backend_params(DATABASE_BACKENDS))
def alias(request: pytest.FixtureRequest, live_db: None) -> str:
    return request.param


@pytest.fixture
def held(alias: str) -> Iterator[Lease]:
    """A lease taken before the table goes; the table is gone while the test runs."""
    from occupy.models import Occupation

    backend = get_backend(alias)
    lease = occupy.acquire("unmigrated:held", owner="alice", ttl=30, timeout=0, backend=alias)
    with connections[backend.database].schema_editor() as editor:
        editor.delete_model(Occupation)
    try:
        yield lease
    finally:
        with connections[backend.database].schema_editor() as editor:
            editor.create_model(Occupation)
        backend.close()  # nothing prepared on the old table survives


@pytest.fixture
def unrecorded(alias: str) -> Iterator[None]:
    """Occupy's migration is not recorded as applied (a database never migrated)."""
    recorder = MigrationRecorder(connections[get_backend(alias).database])
    applied = [name for app, name in recorder.applied_migrations() if app == "occupy"]
    for name in applied:
        recorder.record_unapplied("occupy", name)
    try:
        yield
    finally:
        for name in applied:
            recorder.record_applied("occupy", name)


def _calls(alias: str, held: Lease) -> dict[str, Callable[[], object]]:
    out = io.StringIO()
    return {
        "acquire": lambda: occupy.acquire(
            "unmigrated:1", owner="bob", ttl=30, timeout=0, backend=alias
        ),
        "acquire, waiting": lambda: occupy.acquire(
            "unmigrated:1", owner="bob", ttl=30, timeout=0.2, backend=alias
        ),
        "holder": lambda: occupy.holder("unmigrated:1", backend=alias),
        "release": lambda: occupy.release(held),
        "sweep_locks": lambda: call_command("sweep_locks", backend=[alias], stdout=out),
        "sweep_locks --dry-run": lambda: call_command(
            "sweep_locks", "--dry-run", backend=[alias], stdout=out
        ),
        "list_locks": lambda: call_command("list_locks", backend=[alias], stdout=out),
    }


def test_every_call_says_to_run_migrate(alias: str, held: Lease, unrecorded: None) -> None:
    database = get_backend(alias).database
    command = f"'python manage.py migrate occupy --database {database}'"
    for name, call in _calls(alias, held).items():
        if name.endswith("_locks") or "_locks " in name:
            # The commands report it in one line and exit non-zero, with no traceback.
            with pytest.raises(CommandError) as failed:
                call()
            message = str(failed.value)
            assert message.startswith(f"{alias}: "), (name, message)
            assert message.endswith(f"Run {command}."), (name, message)
            assert repr(database) in message, name
            continue
        with pytest.raises(StoreNotMigrated) as info:
            call()
        error = info.value
        assert isinstance(error, StoreUnavailable), name
        assert str(error).endswith(f"Run {command}."), (name, str(error))
        assert repr(alias) in str(error) and repr(database) in str(error), name
        assert isinstance(error.__cause__, DatabaseError), name
        assert error.backend == alias, name
        if name in ("acquire", "holder"):
            assert error.key == "unmigrated:1", name


def test_a_dropped_table_of_a_recorded_migration_says_to_unrecord_it_first(
    alias: str, held: Lease
) -> None:
    database = get_backend(alias).database
    with pytest.raises(StoreNotMigrated) as info:
        occupy.acquire("unmigrated:1", owner="bob", ttl=30, timeout=0, backend=alias)
    assert (
        f"'python manage.py migrate occupy zero --fake --database {database}', then "
        f"'python manage.py migrate occupy --database {database}'"
    ) in str(info.value)


def test_the_backend_works_again_once_the_table_is_back(alias: str, held: Lease) -> None:
    with pytest.raises(StoreNotMigrated):
        occupy.holder("unmigrated:1", backend=alias)
    from occupy.models import Occupation

    with connections[get_backend(alias).database].schema_editor() as editor:
        editor.create_model(Occupation)
    try:
        lease = occupy.acquire("unmigrated:1", owner="bob", ttl=30, timeout=0, backend=alias)
        occupy.release(lease)
    finally:
        with connections[get_backend(alias).database].schema_editor() as editor:
            editor.delete_model(Occupation)
