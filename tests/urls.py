from django.contrib import admin
from django.urls import include, path

from tests.testapp.admin import plain_site
from tests.testapp.api import router

urlpatterns = [
    path("admin/", admin.site.urls),
    path("plain-admin/", plain_site.urls),
    path("api/", include(router.urls)),
]
