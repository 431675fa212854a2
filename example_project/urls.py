"""URLs of the example project: the admin and the library API."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("example_project.library.urls")),
]
