"""The database backend: claims as rows of ``occupy_occupation`` (see :mod:`.backend`)."""

from occupy.backends.db.backend import DatabaseBackend

__all__ = ["DatabaseBackend"]
