"""Fixtures of the example project's tests: the example site, running."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.example_site import Site, run_site


@pytest.fixture(scope="session")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The example site, migrated, with its users, served on a free port."""
    with run_site(tmp_path_factory.mktemp("example")) as site:
        yield site
