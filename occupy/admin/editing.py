"""What the change form and the lease endpoints share: the keys of an object, the
owner of a tab, taking, resuming and taking over a tab's leases, and the sentences the
admin says about them.

Invariants:

- A lease is its user's: a token is used only when the store says it holds the key for
  the owner ``admin:user:<the requesting user>:tab:<the posted tab>``; another user
  presenting it (replayed hidden fields) is refused as if the lease were lost, and the
  lease is left as it is.
- "May I take this over?" is decided on the holder the store replaces, in the
  takeover itself (``occupy.takeover(..., if_fence=holder.fence)``): when the holder
  changed since it was read, it is read and decided again (a few times), never
  replaced on an old read.
- The store being down (:class:`~occupy.StoreUnavailable`) is a condition the page
  tells, never a server error; so is an admin that cannot lock as configured
  (:class:`~occupy.Misconfigured`), told apart: it lasts until the settings are fixed.
- Every sentence is one translatable message (:mod:`occupy.admin.sentences`).
"""

from __future__ import annotations

import re
import secrets
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from django.core import checks
from django.http import HttpRequest
from django.utils.translation import gettext

import occupy
from occupy.admin.sentences import (
    KEPT,
    LOST,
    STORE_UNAVAILABLE,
    STORE_UNAVAILABLE_DELETE,
    STORE_UNAVAILABLE_NOW,
    busy_text,
    unavailable_text,
)
from occupy.admin.stores import AdminBackendMixin
from occupy.checks import Rule, attribute_errors, checked_attribute
from occupy.exceptions import (
    LeaseLost,
    Misconfigured,
    Occupied,
    StoreUnavailable,
    TakeoverRefused,
)
from occupy.leases import Holder, Lease
from occupy.owners import admin_owner, owner_display, owner_user_pk, parse_owner
from occupy.validation import check_ttl

__all__ = [
    "STORE_UNAVAILABLE",
    "STORE_UNAVAILABLE_DELETE",
    "STORE_UNAVAILABLE_NOW",
    "EditLeaseBase",
    "EditState",
    "TakeoverDenied",
]

#: A tab id as the page carries it.
TAB = re.compile(r"^[0-9a-f]{16}$")
#: The attribute of the request that carries the change view's lease state.
STATE = "_occupy_edit"
#: How often a takeover reads the holder again when it changed hands meanwhile.
TAKEOVER_ATTEMPTS = 3


class TakeoverDenied(Exception):
    """The user may not take the object over from ``holder`` (another user's lease)."""

    def __init__(self, holder: Holder) -> None:
        super().__init__(f"{holder.owner!r} holds it")
        self.holder = holder


@dataclass
class EditState:
    """The edit lease of one change-form request."""

    tab: str
    owner: str
    keys: list[str]
    leases: list[Lease] = field(default_factory=list)
    #: Who holds the object when this request could not lease it.
    holder: Holder | None = None
    #: Why a save was refused; the form says it, keeping the user's input.
    error: str | None = None
    #: The requesting user's primary key, as text.
    user_pk: str | None = None
    #: The lease store could not be reached, or used as configured.
    unavailable: bool = False
    #: The admin cannot lock as configured (:class:`~occupy.Misconfigured`): waiting
    #: does not help, unlike the store being down.
    misconfigured: bool = False
    #: The tokens the page carries when no lease could be checked (store down).
    posted_tokens: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """Return ``"editing"``, ``"readonly"``, ``"lost"`` or ``"unavailable"``."""
        if self.unavailable:
            return "editing" if self.error is not None else "unavailable"
        if self.error is not None:
            return "lost"
        return "editing" if self.leases else "readonly"

    def refused(self, exc: StoreUnavailable) -> None:
        """Note that ``exc`` stopped this request from locking (store down or
        misconfigured)."""
        self.unavailable = True
        self.misconfigured = isinstance(exc, Misconfigured)

    @property
    def read_only(self) -> bool:
        """Return whether Django should render the read-only change form."""
        return self.name in ("readonly", "unavailable")

    @property
    def tokens(self) -> list[str]:
        """Return the tokens the page keeps (the leases', else the posted ones)."""
        return [lease.token for lease in self.leases] or self.posted_tokens


def new_tab() -> str:
    """Return a fresh tab id."""
    return secrets.token_hex(8)


#: The edit lease's durations, each with the rule its value follows (``manage.py
#: check`` reports a value it refuses as ``occupy.E304``; a page meeting one is
#: read-only and says the admin's lock settings are wrong, never a server error).
DURATIONS: dict[str, Rule] = {
    "edit_lease_ttl": check_ttl,
    "edit_lease_poll": check_ttl,
    "edit_lease_check": check_ttl,
}


class EditLeaseBase(AdminBackendMixin):
    """The hooks and lease handling of :class:`~occupy.admin.EditLeaseAdminMixin`."""

    #: Lease length in seconds; the page renews it every third of it. Chrome wakes the
    #: timers of a tab hidden for 5 minutes only once a minute, so keep it >= 120 s.
    edit_lease_ttl: float = 120
    #: How often, in seconds, a read-only page asks whether the lease is free.
    edit_lease_poll: float = 2
    #: How often, in seconds, an editing page asks whether it still holds the lease (a
    #: read, no write): a takeover or a force release shows within this time.
    edit_lease_check: float = 3

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Add ``occupy.E304`` for each of ``edit_lease_ttl``, ``edit_lease_poll`` and
        ``edit_lease_check`` that is not a number of seconds in range."""
        return [*super().check(**kwargs), *attribute_errors(self, DURATIONS)]

    def _duration(self, attribute: str) -> float:
        """Return the edit lease's ``attribute`` in seconds; raise
        :class:`~occupy.Misconfigured` (a :class:`~occupy.StoreUnavailable`: the page is
        read-only and says the settings are wrong) when it is not one."""
        seconds: float = checked_attribute(self, attribute, DURATIONS[attribute])
        return seconds

    # --- hooks ---------------------------------------------------------------------
    def get_occupy_key(self, obj: Any) -> str:
        """Return the lock key of ``obj`` (its ``occupy_key``, else ``app.model:pk``)."""
        key = getattr(obj, "occupy_key", None)
        if key is None:
            from occupy.models import object_key

            key = object_key(type(obj), obj.pk)
        return key

    def get_occupy_keys(self, request: HttpRequest, obj: Any) -> list[str]:
        """Return the keys an editor of ``obj`` holds: its own key first, then those of
        related objects edited on the same page (inlines), if you add them."""
        return [self.get_occupy_key(obj)]

    def has_takeover_permission(self, request: HttpRequest, obj: Any) -> bool:
        """Return whether the user may take another user's edit lease over."""
        opts = obj._meta
        user = request.user
        return bool(
            user.has_perm("occupy.force_release_occupation")
            or user.has_perm(f"{opts.app_label}.takeover_{opts.model_name}")
        )

    # --- keys, owners, holders -----------------------------------------------------------
    def _keys(self, request: HttpRequest, obj: Any) -> list[str]:
        keys = self.get_occupy_keys(request, obj)
        main = keys[0]
        return [main, *sorted(set(keys) - {main})]

    def _state(self, request: HttpRequest, obj: Any, tab: str) -> EditState:
        return EditState(
            tab=tab,
            owner=self._owner(request, tab),
            keys=self._keys(request, obj),
            user_pk=str(request.user.pk),
        )

    def _owner(self, request: HttpRequest, tab: str) -> str:
        return admin_owner(request.user.pk, tab)

    def _holder(self, key: str) -> Holder | None:
        return occupy.holder(key, backend=self.get_occupy_backend())

    def _is_users(self, request: HttpRequest, holder: Holder | None) -> bool:
        """Return whether ``holder`` is one of the requesting user's tabs."""
        return holder is not None and owner_user_pk(holder.owner) == str(request.user.pk)

    def _busy(self, request: HttpRequest, holder: Holder | None, obj: Any, deleted: bool) -> str:
        """Say that ``obj`` is not (to be) deleted, or changed, because ``holder`` edits it."""
        if holder is None:
            who = gettext("someone")
        elif self._is_users(request, holder):
            who = gettext("you, in another tab")
        else:
            who = owner_display(holder.owner)
        return str(busy_text(deleted)) % {"object": obj, "holder": who}

    # --- taking, resuming, releasing -----------------------------------------------------
    def _take(self, request: HttpRequest, obj: Any, keys: list[str], owner: str) -> list[Lease]:
        """Take every key for ``owner`` or none, in sorted order (no deadlock between
        two pages locking the same objects). A key this very tab holds (a reload) is
        taken over from itself; any other holder raises :class:`~occupy.Occupied`."""
        leases: dict[str, Lease] = {}
        try:
            for key in sorted(keys):
                leases[key] = self._take_one(
                    request, obj, key, owner, may=lambda h, owner=owner: h.owner == owner
                )
        except BaseException:
            self._release_all(list(leases.values()))
            raise
        return [leases[key] for key in keys]

    def _take_one(
        self,
        request: HttpRequest,
        obj: Any,
        key: str,
        owner: str,
        *,
        may: Any,
        replaced: list[Holder] | None = None,
    ) -> Lease:
        """Take ``key`` for ``owner``: free, or from a holder ``may(holder)`` allows,
        decided on the holder the store replaces (``if_fence``). Raise
        :class:`~occupy.Occupied` when a holder is not allowed (or the key keeps
        changing hands); note the holders replaced in ``replaced``."""
        alias = self.get_occupy_backend()
        ttl = self._duration("edit_lease_ttl")
        for _attempt in range(TAKEOVER_ATTEMPTS):
            current = self._holder(key)
            if current is None:
                try:
                    return occupy.acquire(
                        key,
                        owner=owner,
                        ttl=ttl,
                        timeout=0,
                        reentrant=False,
                        backend=alias,
                    )
                except Occupied:
                    continue  # taken in between: decide on the new holder
            if not may(current):
                raise Occupied(f"{key!r} is held by {current.owner}.", key=key, holder=current)
            try:
                lease = occupy.takeover(
                    key,
                    owner=owner,
                    ttl=ttl,
                    reentrant=False,
                    if_fence=current.fence,
                    backend=alias,
                )
            except TakeoverRefused:
                continue  # it changed hands since it was read: decide again
            if replaced is not None and current.owner != owner:
                replaced.append(current)
            return lease
        raise Occupied(
            f"{key!r} changes hands too fast to be taken.", key=key, holder=self._holder(key)
        )

    def _take_over(
        self, request: HttpRequest, obj: Any, keys: list[str], owner: str
    ) -> list[Holder]:
        """Take every key for ``owner`` from whoever holds it, if allowed: the user's
        own tabs always, another user's lease with :meth:`has_takeover_permission`
        (asked once, only when such a holder is met). Return the other users' holders
        replaced; raise :class:`TakeoverDenied` for a holder the user may not replace."""
        allowed: list[bool] = []

        def may(holder: Holder) -> bool:
            if self._is_users(request, holder):
                return True
            if not allowed:
                allowed.append(self.has_takeover_permission(request, obj))
            if not allowed[0]:
                raise TakeoverDenied(holder)
            return True

        replaced: list[Holder] = []
        taken: list[Lease] = []
        try:
            for key in sorted(keys):
                taken.append(self._take_one(request, obj, key, owner, may=may, replaced=replaced))
        except BaseException:
            self._release_all(taken)
            raise
        others = {h.owner: h for h in reversed(replaced) if not self._is_users(request, h)}
        return list(others.values())

    def _resume(self, request: HttpRequest, state: EditState, tokens: list[str]) -> list[Lease]:
        """Return the tab's leases, each renewed, if every token holds its key for this
        user and tab; raise :class:`~occupy.LeaseLost` otherwise (another user's
        token included: it is left as it was, not renewed)."""
        keys = state.keys
        if len(tokens) != len(keys):
            raise LeaseLost("The form carries no edit lease for these objects.", key=keys[0])
        alias = self.get_occupy_backend()
        ttl = self._duration("edit_lease_ttl")
        try:
            # A store that holds the token extends it at least 1 s: no renewal of a
            # lease that turns out to be someone else's.
            found = [
                occupy.resume(key, token, ttl=1, backend=alias)
                for key, token in zip(keys, tokens, strict=True)
            ]
        except (TypeError, ValueError) as e:  # a token that cannot be one
            raise LeaseLost(str(e), key=keys[0]) from e
        for lease in found:
            if lease.owner != state.owner:
                raise LeaseLost("This edit lease is not this tab's.", key=lease.key)
        return [occupy.resume(lease.key, lease.token, ttl=ttl, backend=alias) for lease in found]

    def _release_all(self, leases: list[Lease]) -> None:
        for lease in leases:
            with suppress(LeaseLost, StoreUnavailable):
                occupy.release(lease)

    # --- what the pages say ----------------------------------------------------------------
    def _lost_message(self, request: HttpRequest, state: EditState, *, saving: bool = True) -> str:
        """Say why the tab's lease is gone and what became of the user's input."""
        try:
            holder = self._holder(state.keys[0])
        except StoreUnavailable as e:
            return f"{unavailable_text(e, 'save')} {KEPT}"
        state.holder = holder
        # Whether the lease was taken over, or expired before someone took the free
        # object, or was never this page's (a replayed form), the store cannot tell:
        # say who edits now, never that someone took over.
        if holder is None or not parse_owner(holder.owner).is_edit_lease:
            text = LOST["ended"][saving]
        elif self._is_users(request, holder):
            text = LOST["other_tab"][saving]
        else:
            text = LOST["holder"][saving]
        return str(text) % {"holder": owner_display(holder.owner) if holder is not None else ""}
