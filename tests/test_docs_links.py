"""The check hints point to pages of the published documentation that exist in docs/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from occupy.docs import DOCS_URL, docs_url

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize(
    "page, source, heading",
    [
        ("reference/settings", "reference/settings.md", None),
        ("backends/", "backends/index.md", None),
        ("topics/models#composite-primary-keys", "topics/models.md", "Composite primary keys"),
    ],
)
def test_a_docs_url_names_a_page_that_exists(page: str, source: str, heading: str | None) -> None:
    url = docs_url(page)
    assert url.startswith(DOCS_URL) and " " not in url
    assert (DOCS / source).is_file()
    if heading is not None:
        assert url.endswith(".html#" + heading.lower().replace(" ", "-"))
        assert re.search(rf"^#+ {heading}$", (DOCS / source).read_text(), re.MULTILINE)
