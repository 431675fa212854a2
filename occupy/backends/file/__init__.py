"""The file backend: claim files in a shared directory (see :mod:`.backend`)."""

from occupy.backends.file.backend import FileBackend

__all__ = ["FileBackend"]
