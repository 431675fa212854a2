"""occupy for Django REST framework: conditional requests, writes that respect edit
leases, lease endpoints, and the HTTP contract of :mod:`occupy.http`.

    from occupy.rest_framework import OccupyModelSerializerMixin, OccupyViewMixin

Importing it, or any module of it, without Django REST framework raises an
``ImportError`` naming the extra that installs it (``django-occupy[drf]``).
"""

from occupy.extras import require

require(
    "rest_framework", feature="occupy.rest_framework", extra="drf", package="Django REST framework"
)

from occupy.rest_framework.mixins import (  # noqa: E402
    ConditionalMixin,
    EditLeaseMixin,
    OccupiedWritesMixin,
    OccupyErrorsMixin,
    OccupyViewMixin,
)
from occupy.rest_framework.serializers import (  # noqa: E402
    LeaseSerializer,
    OccupyModelSerializerMixin,
    VersionField,
)

__all__ = [
    "ConditionalMixin",
    "EditLeaseMixin",
    "LeaseSerializer",
    "OccupiedWritesMixin",
    "OccupyErrorsMixin",
    "OccupyModelSerializerMixin",
    "OccupyViewMixin",
    "VersionField",
]
