"""The public lock API: ``lock``, ``acquire``, ``release``, ``holder``, ``lock_many`` and
their async twins (re-exported by :mod:`occupy`). The calls are in
:mod:`occupy.api.calls`, the context managers in :mod:`occupy.api.locks`; see
docs/topics/locks.md.
"""

from __future__ import annotations

from occupy.api.calls import (
    DEFAULT,
    aacquire,
    acquire,
    aholder,
    arelease,
    aresume,
    atakeover,
    holder,
    release,
    resume,
    takeover,
)
from occupy.api.locks import holds_for_transaction, lock, lock_many

__all__ = [
    "DEFAULT",
    "aacquire",
    "acquire",
    "aholder",
    "arelease",
    "aresume",
    "atakeover",
    "holder",
    "holds_for_transaction",
    "lock",
    "lock_many",
    "release",
    "resume",
    "takeover",
]
