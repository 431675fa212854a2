"""The sentences the admin's lease pages say, each one translatable message.

Invariants: ``gettext_lazy`` here at module level (the language is the request's, known
when a sentence is rendered), named placeholders (a translation orders them as its
language needs), and no sentence assembled from English fragments: a variant ("deleted"
or "changed", a save refused or a page told) is a message of its own.
"""

from __future__ import annotations

from typing import Literal

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from occupy.exceptions import Misconfigured, StoreUnavailable

__all__ = [
    "KEPT",
    "LOST",
    "MISCONFIGURED",
    "STORE_UNAVAILABLE",
    "STORE_UNAVAILABLE_DELETE",
    "STORE_UNAVAILABLE_LIST",
    "STORE_UNAVAILABLE_NOW",
    "STORE_UNAVAILABLE_TAKEOVER",
    "busy_text",
    "unavailable_text",
]

#: What the admin says when the lease store cannot be reached.
STORE_UNAVAILABLE = _("The lock store is unavailable: nothing was saved, try again in a moment.")
#: What a refused delete says when the lease store cannot be reached.
STORE_UNAVAILABLE_DELETE = _(
    "The lock store is unavailable: nothing was deleted, try again in a moment."
)
#: What an open page says meanwhile (the endpoints' 503).
STORE_UNAVAILABLE_NOW = _(
    "The lock store is unavailable: nothing can be saved now. This page "
    "keeps trying and says when it can."
)
#: What a refused takeover says when the lease store cannot be reached.
STORE_UNAVAILABLE_TAKEOVER = _(
    "The lock store is unavailable: nothing was taken over, try again in a moment."
)
#: What the changelist says when the lease store cannot be reached.
STORE_UNAVAILABLE_LIST = _("The lock store is unavailable: who is editing which row is not shown.")
#: What a refused save adds: the form shown again keeps the user's input.
KEPT = _("Your changes are still in this form.")


#: What the admin refused, or cannot show: a saved form (``"save"``), a delete, a
#: takeover, anything from an open page (``"now"``, the endpoints' 503), the changelist's
#: "being edited" column (``"list"``).
Refusal = Literal["save", "delete", "takeover", "now", "list"]

_STORE_DOWN: dict[Refusal, Promise] = {
    "save": STORE_UNAVAILABLE,
    "delete": STORE_UNAVAILABLE_DELETE,
    "takeover": STORE_UNAVAILABLE_TAKEOVER,
    "now": STORE_UNAVAILABLE_NOW,
    "list": STORE_UNAVAILABLE_LIST,
}

#: What the admin says when it cannot lock as configured (:class:`~occupy.Misconfigured`:
#: an ``occupy_backend`` or ``edit_lease_ttl`` that ``manage.py check`` reports), by what
#: it refused. Unlike the store being down, waiting does not help: no sentence asks to
#: try again or promises that the page turns editable.
MISCONFIGURED: dict[Refusal, Promise] = {
    "save": _(
        "This object cannot be edited here: its admin's lock settings are wrong "
        "(manage.py check names the problem). Nothing was saved."
    ),
    "delete": _(
        "This object cannot be deleted here: its admin's lock settings are wrong "
        "(manage.py check names the problem). Nothing was deleted."
    ),
    "takeover": _(
        "This object cannot be edited here: its admin's lock settings are wrong "
        "(manage.py check names the problem). Nothing was taken over."
    ),
    "now": _(
        "This object cannot be edited here: its admin's lock settings are wrong "
        "(manage.py check names the problem). Nothing can be saved from this page."
    ),
    "list": _(
        "Who is editing which row is not shown: this admin's lock settings are wrong "
        "(manage.py check names the problem)."
    ),
}


def unavailable_text(exc: StoreUnavailable, refused: Refusal) -> str:
    """Return what the admin says, in the active language, when ``exc`` stopped it from
    locking for ``refused``: its settings are wrong (:class:`~occupy.Misconfigured`), or
    the store is down."""
    return str((MISCONFIGURED if isinstance(exc, Misconfigured) else _STORE_DOWN)[refused])


#: Why a tab's lease is gone, by who edits now, then by whether a save was refused
#: (``True``) or an open page is told (``False``): whole sentences, for translators.
LOST: dict[str, dict[bool, Promise]] = {
    "ended": {
        True: _(
            "Your edit lease ended (it expired or was released): nothing was saved. Your "
            "changes are still in this form; reload the page to edit the current version."
        ),
        False: _(
            "Your edit lease ended (it expired or was released). Your changes are still in "
            "this form but cannot be saved from here; reload the page to edit the current "
            "version."
        ),
    },
    "other_tab": {
        True: _(
            "You are editing this in another tab: nothing was saved. Your changes are still "
            "in this form; reload the page to edit the current version."
        ),
        False: _(
            "You are editing this in another tab. Your changes are still in this form but "
            "cannot be saved from here; reload the page to edit the current version."
        ),
    },
    "holder": {
        True: _(
            "%(holder)s is editing this now: nothing was saved. Your changes are still in "
            "this form; reload the page to edit the current version."
        ),
        False: _(
            "%(holder)s is editing this now. Your changes are still in this form but cannot "
            "be saved from here; reload the page to edit the current version."
        ),
    },
}


#: Why ``%(object)s`` is not deleted (``True``) or changed (``False``): ``%(holder)s``
#: edits it.
_BUSY = {
    True: _(
        "“%(object)s” is being edited by %(holder)s: it is not deleted while they "
        "edit (try again when they are done)."
    ),
    False: _(
        "“%(object)s” is being edited by %(holder)s: it is not changed while they "
        "edit (try again when they are done)."
    ),
}


def busy_text(deleted: bool) -> Promise:
    """Return the sentence refusing a delete (``deleted``) or a change of an object
    someone edits, with ``%(object)s`` and ``%(holder)s`` to fill in."""
    return _BUSY[deleted]
