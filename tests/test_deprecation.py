"""``occupy.deprecation``: the warning of the next release's removals is a
``DeprecationWarning``, so Python, pytest and ``-W error::DeprecationWarning`` treat it
as they treat Django's own."""

from __future__ import annotations

import warnings

import pytest

from occupy.deprecation import RemovedInNextVersionWarning, RemovedInOccupy02Warning


def test_the_next_releases_removals_warn_as_deprecation_warnings() -> None:
    assert issubclass(RemovedInOccupy02Warning, DeprecationWarning)
    assert RemovedInNextVersionWarning is RemovedInOccupy02Warning


def test_an_error_filter_on_deprecation_warnings_catches_it() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(RemovedInOccupy02Warning, match=r"gone in 0\.2"):
            warnings.warn("gone in 0.2", RemovedInOccupy02Warning, stacklevel=1)
