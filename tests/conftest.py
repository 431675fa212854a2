"""Fixtures shared by the whole suite: real databases, clean lock tables, backends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connections

from occupy.backends import reset_backends

#: Which server each backend alias needs (to skip with the server's reason).
SERVER_OF = {"db-postgresql": "postgresql", "db-mysql": "mysql"}


def server_skip(alias: str) -> str | None:
    """Return why backend ``alias`` cannot run here, or ``None``."""
    if alias == f"db-{settings.DEFAULT_DB}":
        return f"the {settings.DEFAULT_DB} database is 'default' in this run"
    if alias not in settings.OCCUPY["BACKENDS"]:
        server = SERVER_OF.get(alias, alias.removeprefix("db-"))
        return settings.SKIPS.get(server, f"backend {alias!r} is not configured")
    return None


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment: None, django_db_blocker) -> Iterator[None]:
    """Create and migrate the test database of every configured alias, once."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases=set(connections))
    yield
    with django_db_blocker.unblock():
        for alias in connections:
            connections[alias].close()
        reset_backends()
        teardown_databases(config, verbosity=0)


def wipe() -> None:
    """Delete every claim and test row in every test database."""
    for alias in connections:
        with connections[alias].cursor() as cursor:
            cursor.execute("DELETE FROM occupy_occupation")
            cursor.execute("DELETE FROM testapp_counter")


@pytest.fixture
def live_db(django_db_setup: None, django_db_blocker) -> Iterator[None]:
    """Real, committed database access (locks commit on their own connection anyway)."""
    with django_db_blocker.unblock():
        wipe()
        yield
        wipe()


def backend_params(aliases: list[str]) -> list:
    """Return pytest params for backend aliases, skipped with the server's reason."""
    params = []
    for alias in aliases:
        why = server_skip(alias)
        marks = [pytest.mark.skip(reason=why)] if why else []
        params.append(pytest.param(alias, id=alias, marks=marks))
    return params


#: Every lock backend the contract suite is bound to.
CONTRACT_BACKENDS = ["default", "db-postgresql", "db-mysql"]


@pytest.fixture(params=backend_params(CONTRACT_BACKENDS))
def using(request: pytest.FixtureRequest, live_db: None) -> str:
    """A backend alias; the test runs once per backend."""
    return request.param
