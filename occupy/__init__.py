"""occupy: stop concurrent writers from clobbering each other.

    import occupy

    with occupy.lock("book:1", ttl=30, timeout=5) as lease:
        ...

Locks with expiry, reentrancy, fencing tokens and fair waiting, on a database, Redis,
any Django cache or a directory, behind one API; see the README.
"""

from occupy.api import (
    DEFAULT,
    aacquire,
    acquire,
    aholder,
    arelease,
    aresume,
    atakeover,
    holder,
    holds_for_transaction,
    lock,
    lock_many,
    release,
    resume,
    takeover,
)
from occupy.cachelock import CacheLock
from occupy.exceptions import (
    ConflictError,
    FencedOut,
    InvalidBackendError,
    LeaseLost,
    LockTimeout,
    Occupied,
    OccupyError,
    StoreNotMigrated,
    StoreUnavailable,
    TakeoverRefused,
    TransactionLockRefused,
    VersionConflict,
)
from occupy.leases import Holder, Lease, TransactionHold
from occupy.retry import retry_on_conflict

__version__ = "0.1.0"

__all__ = [
    "DEFAULT",
    "CacheLock",
    "ConflictError",
    "FencedOut",
    "Holder",
    "InvalidBackendError",
    "Lease",
    "LeaseLost",
    "LockTimeout",
    "Occupied",
    "OccupyError",
    "StoreNotMigrated",
    "StoreUnavailable",
    "TakeoverRefused",
    "TransactionHold",
    "TransactionLockRefused",
    "VersionConflict",
    "__version__",
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
    "retry_on_conflict",
    "takeover",
]
