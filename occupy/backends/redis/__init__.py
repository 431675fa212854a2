"""The Redis backend: one Lua script per operation on a django-redis cache's client (see
:mod:`.backend`)."""

from occupy.backends.redis.backend import RedisBackend

__all__ = ["RedisBackend"]
