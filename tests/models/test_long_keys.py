"""A row whose key would be longer than a key may be is locked under a shortened key
(its readable start and a digest): through the model, the querysets, the admin's status
column, on every backend; and the key is read back to its row."""

from __future__ import annotations

import pytest

import occupy
from occupy.keys import DIGEST_CHARS, fit, object_key, parse_object_key
from occupy.models import object_key as model_object_key
from occupy.validation import MAX_KEY_LENGTH
from tests.support.aliases import BACKEND_OF
from tests.testapp.models import Scroll

LONG = "s" * 200 + "-" + "x" * 49  # 250 characters: the longest the field takes


def _code(n: int) -> str:
    # Rows that share the first 220 characters, which is all a shortened key keeps.
    return "a" * 220 + f"{n:030d}"


def test_a_long_key_is_shortened_with_a_digest_and_read_back() -> None:
    key = model_object_key(Scroll, LONG)
    assert len(key) == MAX_KEY_LENGTH
    assert key.startswith("testapp.scroll:" + "s" * 100)
    parsed = parse_object_key(key)
    assert parsed is not None and (parsed.app_label, parsed.model_name) == ("testapp", "scroll")
    assert parsed.digest is not None and len(parsed.digest) == DIGEST_CHARS
    assert parsed.matches(LONG) and not parsed.matches(LONG[:-1] + "y")
    assert model_object_key(Scroll, LONG) == key  # stable
    assert len({model_object_key(Scroll, _code(n)) for n in range(1000)}) == 1000


def test_a_short_key_is_kept_whole_and_never_mistaken_for_a_shortened_one() -> None:
    assert object_key("testapp.scroll", "abc") == "testapp.scroll:abc"
    parsed = parse_object_key("testapp.scroll:abc")
    assert parsed is not None and parsed.pk_text == "abc" and parsed.digest is None
    # A whole key of exactly the longest length that ends like a shortened one is
    # shortened too, so that reading it back is never ambiguous.
    looks = "b" * (MAX_KEY_LENGTH - len("testapp.scroll:") - 41) + "~" + "0" * 40
    key = object_key("testapp.scroll", looks)
    assert key != f"testapp.scroll:{looks}" and parse_object_key(key).matches(looks)
    assert parse_object_key("not a row key") is None
    with pytest.raises(ValueError, match="leave room for a digest"):
        fit("p" * 250, "x" * 10)


def test_a_long_key_locks_on_every_backend(alias: str) -> None:
    scroll = Scroll(code=LONG)  # the model is not asked for its row
    with scroll.occupy(owner="alice", timeout=0, backend=alias) as lease:
        assert lease.key == scroll.occupy_key and len(lease.key) == MAX_KEY_LENGTH
        assert scroll.get_holder(backend=alias).owner == "alice"
        with pytest.raises(occupy.Occupied):
            occupy.acquire(scroll.occupy_key, owner="bob", timeout=0, backend=alias)
        # Another row that shares the start of its key is another key.
        other = Scroll(code=LONG[:-1] + "y")
        occupy.release(occupy.acquire(other.occupy_key, owner="bob", timeout=0, backend=alias))
    assert scroll.get_holder(backend=alias) is None


def test_the_querysets_see_claims_under_shortened_keys(database: str) -> None:
    backend = BACKEND_OF[database]
    rows = [Scroll.objects.using(database).create(code=_code(n)) for n in range(3)]
    objects = Scroll.objects.using(database)
    with rows[1].occupy(owner="alice", backend=backend):
        assert list(objects.occupied(backend=backend)) == [rows[1]]
        assert set(objects.free(backend=backend)) == {rows[0], rows[2]}
    assert set(objects.free(backend=backend)) == set(rows)
