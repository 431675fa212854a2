"""occupy's one Redis lock protocol (:mod:`.protocol`, its Lua scripts and key layout in
:mod:`.scripts`) and the backend that runs it on a django-redis cache's client,
:class:`RedisBackend` (see :mod:`.backend`)."""

from occupy.backends.redis.backend import RedisBackend

__all__ = ["RedisBackend"]
