"""The names of the request members the admin's lease script sends (``edit_lease.js``
writes the same names): one home, read by the change view, its JSON endpoints and the
conflict page."""

from __future__ import annotations

__all__ = ["LEASE_FIELD", "TAB_FIELD"]

#: The browser tab's id, on every request of a change page's script.
TAB_FIELD = "_occupy_tab"
#: A lease token the tab holds (the member repeats, one per key of the object).
LEASE_FIELD = "_occupy_lease"
