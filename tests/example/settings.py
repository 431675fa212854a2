"""The example project's settings as its tests run it: a password hasher that costs
nothing, since HTTP Basic checks the password on every request (the default hasher
is slow on purpose)."""

from example_project.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
