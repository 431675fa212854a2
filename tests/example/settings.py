"""The example project's settings as its tests run it: a password hasher that costs
nothing, since HTTP Basic checks the password on every request (the default hasher
is slow on purpose)."""

import os

from example_project.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The property-based HTTP test keeps the example's edit leases (its ``default`` lock
# backend) on a Redis server of its own, which it stops and starts again while it runs:
# short socket timeouts, so that a server gone away is an answer, not a wait.
if os.environ.get("EXAMPLE_LEASE_REDIS"):
    CACHES["leases"] = {  # noqa: F405
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": os.environ["EXAMPLE_LEASE_REDIS"],
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 2},
    }
    OCCUPY["BACKENDS"]["default"] = {  # noqa: F405
        "BACKEND": "occupy.backends.redis.RedisBackend",
        "OPTIONS": {"CACHE": "leases"},
    }
    # The admin's "being edited" column reads Occupation rows, which Redis does not
    # keep; this test drives the API, not the admin.
    SILENCED_SYSTEM_CHECKS = ["occupy.E102"]
