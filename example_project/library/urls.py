"""Routes of the library API."""

from rest_framework.routers import DefaultRouter

from example_project.library.views import BookViewSet, TaskViewSet

router = DefaultRouter()
router.register("books", BookViewSet)
router.register("tasks", TaskViewSet)
urlpatterns = router.urls
