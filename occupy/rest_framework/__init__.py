"""occupy for Django REST framework: conditional requests, writes that respect edit
leases, lease endpoints, and the HTTP contract of :mod:`occupy.http`.

    from occupy.rest_framework import OccupyModelSerializerMixin, OccupyViewMixin
"""

from occupy.rest_framework.mixins import (
    ConditionalMixin,
    EditLeaseMixin,
    OccupiedWritesMixin,
    OccupyErrorsMixin,
    OccupyViewMixin,
)
from occupy.rest_framework.serializers import (
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
