"""The API the DRF tests call: occupy's mixins on the test models, and a plain DRF
viewset of the same model as the control."""

from django.conf import settings
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import permissions, routers, serializers, viewsets

from occupy.rest_framework import (
    ConditionalMixin,
    OccupyModelSerializerMixin,
    OccupyViewMixin,
)
from tests.testapp.models import Book, Document, Label, LongKeyNote, Manual, Shelf, UUIDBook


class BookSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Book
        fields = ["id", "name", "status", "note"]


class ShelfSerializer(serializers.ModelSerializer):
    class Meta:
        model = Shelf
        fields = ["code", "name"]


class DocumentSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Document
        fields = ["id", "body"]


class LabelSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Label
        fields = ["code", "text"]


class UUIDBookSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = UUIDBook
        fields = ["id", "name"]


class PlainBookSerializer(serializers.ModelSerializer):
    """A plain DRF serializer of a versioned model (no occupy mixin)."""

    class Meta:
        model = Book
        fields = ["id", "name", "status", "note"]


class LongKeyNoteSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = LongKeyNote
        fields = ["slug", "text"]


class ManualSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    """Its version travels as ``revision``; ``version`` is the manual's own field."""

    class Meta:
        model = Manual
        fields = ["id", "title", "version"]


class CustomAnswerSerializer(serializers.Serializer):
    """A user's own 412 body (the schema test checks that it wins)."""

    why = serializers.CharField()


class _Guarded(OccupyViewMixin, viewsets.ModelViewSet):
    permission_classes = [permissions.DjangoModelPermissions]


class BookViewSet(_Guarded):
    queryset = Book.objects.order_by("pk")
    serializer_class = BookSerializer


class ConditionalBookViewSet(ConditionalMixin, viewsets.ModelViewSet):
    """Conditional requests only (no key held around writes)."""

    queryset = Book.objects.order_by("pk")
    serializer_class = BookSerializer
    permission_classes = [permissions.DjangoModelPermissions]


class PlainShelfViewSet(viewsets.ModelViewSet):
    """Plain DRF on a plain model: what the mixins are compared with."""

    queryset = Shelf.objects.order_by("pk")
    serializer_class = ShelfSerializer
    permission_classes = [permissions.DjangoModelPermissions]


class DocumentViewSet(_Guarded):
    queryset = Document.objects.order_by("pk")
    serializer_class = DocumentSerializer


@extend_schema_view(
    partial_update=extend_schema(responses={200: LabelSerializer, 412: CustomAnswerSerializer})
)
class LabelViewSet(_Guarded):
    queryset = Label.objects.order_by("pk")
    serializer_class = LabelSerializer
    lookup_value_regex = "[^/]+"


class UUIDBookViewSet(_Guarded):
    queryset = UUIDBook.objects.order_by("pk")
    serializer_class = UUIDBookSerializer


class PlainBookViewSet(viewsets.ModelViewSet):
    """Plain DRF on a model that gained VersionedMixin, and no other code change."""

    queryset = Book.objects.order_by("pk")
    serializer_class = PlainBookSerializer
    permission_classes = [permissions.DjangoModelPermissions]


class LongKeyNoteViewSet(_Guarded):
    queryset = LongKeyNote.objects.order_by("pk")
    serializer_class = LongKeyNoteSerializer
    lookup_value_regex = "[^/]+"


class ManualViewSet(_Guarded):
    """A model whose version field is ``revision`` (``version_field_name``)."""

    queryset = Manual.objects.order_by("pk")
    serializer_class = ManualSerializer


#: The occupy backends the multiprocess API tests run the document API on, each at
#: ``/api/documents-<alias>/`` (the ones configured here).
DOCUMENT_BACKENDS = [
    alias
    for alias in ("db-postgresql", "db-mysql", "redis")
    if alias in settings.OCCUPY["BACKENDS"]
]

router = routers.DefaultRouter()
router.register("books", BookViewSet)
router.register("plain-shelves", PlainShelfViewSet, basename="plain-shelf")
router.register("conditional-books", ConditionalBookViewSet, basename="conditional-book")
router.register("documents", DocumentViewSet)
router.register("labels", LabelViewSet)
router.register("uuid-books", UUIDBookViewSet)
router.register("plain-books", PlainBookViewSet, basename="plain-book")
router.register("long-key-notes", LongKeyNoteViewSet)
router.register("manuals", ManualViewSet)
for _alias in DOCUMENT_BACKENDS:
    router.register(
        f"documents-{_alias}",
        type(
            f"DocumentViewSet_{_alias.replace('-', '_')}",
            (DocumentViewSet,),
            {"occupy_backend": _alias},
        ),
        basename=f"document-{_alias}",
    )
