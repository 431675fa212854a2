"""What people read is translatable: the DRF details, occupy's HTTP answers and the
admin's messages, banners and script are marked for translation with named placeholders,
``makemessages`` finds them, the source catalog occupy ships holds every one, and an
active translation is what they say.

System check messages are not translated, as Django's own are not (they are read by the
developer, in English, and their ids are what one looks up).
"""

from __future__ import annotations

import array
import ast
import re
import shutil
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.template.loader import render_to_string
from django.test import Client, override_settings
from django.utils import translation

from occupy import http
from occupy.admin.editing import STORE_UNAVAILABLE
from occupy.exceptions import Occupied, StoreUnavailable
from occupy.history import get_change_message, log_entry, took_over_message
from occupy.leases import Holder
from occupy.owners import owner_display
from occupy.rest_framework.exceptions import Locked

ROOT = Path(__file__).resolve().parents[1]
#: The source catalog occupy ships (``make messages`` brings it up to date).
SHIPPED = ROOT / "occupy" / "locale" / "en" / "LC_MESSAGES" / "django.po"

#: A message of each place people read: a DRF exception's default detail, occupy's HTTP
#: answers, the admin's Python code, its templates and its script's sentences.
EXPECTED = [
    "This object is being edited by someone else.",
    "This object is being edited by %(holder)s; try again later.",
    "The lock store is unavailable: nothing was saved, try again in a moment.",
    "“%(object)s” is being edited by %(holder)s: it is not deleted while they edit "
    "(try again when they are done).",
    "Released %(count)d claim.",
    "by %(holder)s until %(until)s",
    "Take the current one",
    "Your edit lease was lost: nothing can be saved from this page.",
]


def msgids(po: Path) -> set[str]:
    """Return the msgids of a ``.po`` file (a plural's singular), continuation lines
    joined, its header left out."""
    found: set[str] = set()
    parts: list[str] | None = None
    for line in [*po.read_text(encoding="utf-8").splitlines(), ""]:
        if parts is not None and line.startswith('"'):
            parts.append(ast.literal_eval(line))
            continue
        if parts is not None:
            found.add("".join(parts))
            parts = None
        if line.startswith('msgid "'):
            parts = [ast.literal_eval(line.removeprefix("msgid "))]
    found.discard("")
    return found


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """Run ``makemessages -l fr`` in a copy of the package (the checkout is never
    written): the catalog it made, and what it said."""
    if shutil.which("xgettext") is None:
        pytest.skip("GNU gettext's xgettext is not installed (apt-get install gettext)")
    copy = tmp_path_factory.mktemp("makemessages") / "occupy"
    shutil.copytree(ROOT / "occupy", copy, ignore=shutil.ignore_patterns("__pycache__", "locale"))
    (copy / "locale").mkdir()
    out = StringIO()
    with pytest.MonkeyPatch.context() as patch, override_settings(LOCALE_PATHS=[]):
        patch.chdir(copy)
        call_command("makemessages", locale=["fr"], verbosity=1, stdout=out, stderr=out)
    yield copy / "locale" / "fr" / "LC_MESSAGES" / "django.po", out.getvalue()


def unnamed_placeholders(message: str) -> list[str]:
    """Return the placeholders of ``message`` that have no name (``%s``, ``%d``), which
    a translation could not reorder."""
    return UNNAMED.findall(NAMED.sub("", message))


#: A named placeholder, or ``%%``; and a placeholder without a name.
NAMED = re.compile(r"%%|%\(\w+\)[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]")
UNNAMED = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdifrxXeEgGc]")


def test_makemessages_finds_the_drf_and_admin_messages(made: tuple[Path, str]) -> None:
    po, said = made
    found = msgids(po)
    assert [message for message in EXPECTED if message not in found] == [], said
    assert unnamed_placeholders("%s is editing %(what)s since %d") == ["%s", "%d"]
    assert {m: unnamed_placeholders(m) for m in found if unnamed_placeholders(m)} == {}


def test_the_shipped_catalog_holds_every_message(made: tuple[Path, str]) -> None:
    """``occupy/locale/en`` is the catalog translators start from: it must hold what the
    code marks (run ``make messages`` after changing a message)."""
    po, _said = made
    assert SHIPPED.is_file()
    missing = msgids(po) - msgids(SHIPPED)
    stale = msgids(SHIPPED) - msgids(po)
    assert (missing, stale) == (set(), set()), "run `make messages`"


# --- an active translation -----------------------------------------------------------------
FRENCH = {
    "This object is being edited by someone else.": "Quelqu'un d'autre modifie cet objet.",
    "The lock store is unavailable: nothing was saved, try again in a moment.": (
        "Le stockage des verrous est indisponible : rien n'a été enregistré, réessayez "
        "dans un instant."
    ),
    "The lock store cannot be reached right now; nothing was written. Try again shortly.": (
        "Le stockage des verrous est injoignable ; rien n'a été écrit. Réessayez bientôt."
    ),
    "This object is being edited by %(holder)s; try again later.": (
        "%(holder)s modifie cet objet ; réessayez plus tard."
    ),
    "someone else": "quelqu'un d'autre",
    "Took over the edit lease from %(holder)s (fence %(fence)s).": (
        "Bail de modification repris à %(holder)s (jeton %(fence)s)."
    ),
    "You are editing: others see this object read-only until you save or leave (lease "
    "until %(until)s).": "Vous modifiez cet objet jusqu'à %(until)s.",
}


def write_mo(path: Path, messages: dict[str, str]) -> None:
    """Write a GNU ``.mo`` catalog of ``messages`` (as ``msgfmt`` would; no gettext
    needed)."""
    entries = {"": "Content-Type: text/plain; charset=UTF-8\n", **messages}
    keys = sorted(entries)
    ids = strs = b""
    offsets = []
    for key in keys:
        raw_id, raw_str = key.encode(), entries[key].encode()
        offsets.append((len(ids), len(raw_id), len(strs), len(raw_str)))
        ids += raw_id + b"\0"
        strs += raw_str + b"\0"
    key_start = 7 * 4 + 16 * len(keys)
    value_start = key_start + len(ids)
    table = [n for o1, l1, _o2, _l2 in offsets for n in (l1, o1 + key_start)]
    table += [n for _o1, _l1, o2, l2 in offsets for n in (l2, o2 + value_start)]
    header = struct.pack("Iiiiiii", 0x950412DE, 0, len(keys), 28, 28 + len(keys) * 8, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + array.array("i", table).tobytes() + ids + strs)


@contextmanager
def in_french(catalogs: Path) -> Iterator[None]:
    """Make French active, from a catalog in ``catalogs`` that translates
    :data:`FRENCH`."""
    write_mo(catalogs / "fr" / "LC_MESSAGES" / "django.mo", FRENCH)
    with override_settings(LOCALE_PATHS=[str(catalogs)]), translation.override("fr"):
        yield


@pytest.fixture
def french(tmp_path: Path) -> Iterator[None]:
    """Make French active, from a catalog that translates :data:`FRENCH`."""
    with in_french(tmp_path):
        yield


@pytest.mark.usefixtures("french")
def test_the_drf_and_http_details_are_translated() -> None:
    assert str(Locked().detail) == "Quelqu'un d'autre modifie cet objet."
    down = http.problem_for(StoreUnavailable("down"))
    assert down.detail.startswith("Le stockage des verrous est injoignable")
    soon = datetime.now(timezone.utc) + timedelta(seconds=30)
    holder = Holder(owner="worker-1", expires_at=soon, fence=1)
    busy = http.problem_for(Occupied("held", key="k", holder=holder), display=owner_display)
    assert busy.detail == "quelqu'un d'autre modifie cet objet ; réessayez plus tard."


@pytest.mark.usefixtures("french")
def test_the_admin_messages_and_the_scripts_sentences_are_translated() -> None:
    assert str(STORE_UNAVAILABLE).startswith("Le stockage des verrous est indisponible")
    html = render_to_string(
        "admin/occupy/edit_lease.html", {"edit": {"state": "editing", "urls": {}}}
    )
    # The sentence the script says on each renewal, its {until} left for it to fill.
    assert '<span data-text="editing">Vous modifiez cet objet jusqu\'à {until}.' in html, html


@pytest.mark.django_db
def test_a_history_entry_is_read_in_the_readers_language(
    admin_client: Client, admin_user: Any, tmp_path: Path
) -> None:
    """An entry is stored untranslated and read in the language of whoever reads it,
    on the object's History page too; Django's own reading of it is its own words."""
    from django.contrib.admin.models import CHANGE, LogEntry

    from tests.testapp.models import Document

    doc = Document.objects.create(body="draft")
    log_entry(admin_user.pk, doc, CHANGE, took_over_message("Editor", 7))
    entry = LogEntry.objects.get()
    history = f"/admin/testapp/document/{doc.pk}/history/"
    english = "Took over the edit lease from Editor (fence 7)."
    assert get_change_message(entry) == english
    assert english in admin_client.get(history).content.decode()
    with in_french(tmp_path):
        french = "Bail de modification repris à Editor (jeton 7)."
        assert get_change_message(entry) == french
        page = admin_client.get(history).content.decode()
        assert french in page and english not in page
    # Where occupy does not read it (an admin without occupy's mixins), Django does.
    assert entry.get_change_message() == "Changed edit lease."
