"""Locks in etcd: see :mod:`occupy.backends.etcd.backend` and docs/backends/etcd.md."""

from occupy.backends.etcd.backend import EtcdBackend

__all__ = ["EtcdBackend"]
