"""The sentences the admin's lease pages say, each one translatable message.

Invariants: ``gettext_lazy`` here at module level (the language is the request's, known
when a sentence is rendered), named placeholders (a translation orders them as its
language needs), and no sentence assembled from English fragments: a variant ("deleted"
or "changed", a save refused or a page told) is a message of its own.
"""

from __future__ import annotations

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

__all__ = [
    "KEPT",
    "LOST",
    "STORE_UNAVAILABLE",
    "STORE_UNAVAILABLE_DELETE",
    "STORE_UNAVAILABLE_NOW",
    "busy_text",
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
#: What a refused save adds: the form shown again keeps the user's input.
KEPT = _("Your changes are still in this form.")


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
