"""Settings of a user's project: PostgreSQL, occupy with its defaults."""

import os

SECRET_KEY = "user-project-only-not-secret"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "occupy", "shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": f"userproject{os.environ.get('OCCUPY_TEST_SUFFIX', '')}",
        "USER": "postgres",
        "HOST": os.environ.get("OCCUPY_TEST_HOST", "127.0.0.1"),
        "PORT": 5432,
    }
}
ROOT_URLCONF = "shop.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
