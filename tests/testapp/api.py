"""The API the DRF tests call: occupy's mixins on the test models, and a plain DRF
viewset of the same model as the control."""

from rest_framework import permissions, routers, serializers, viewsets

from occupy.rest_framework import OccupyModelSerializerMixin, OccupyViewMixin
from tests.testapp.models import Book, Document, Label, UUIDBook


class BookSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Book
        fields = ["id", "name", "status", "note"]


class PlainBookSerializer(serializers.ModelSerializer):
    class Meta:
        model = Book
        fields = ["id", "name", "status", "note", "version"]


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


class _Guarded(OccupyViewMixin, viewsets.ModelViewSet):
    permission_classes = [permissions.DjangoModelPermissions]


class BookViewSet(_Guarded):
    queryset = Book.objects.order_by("pk")
    serializer_class = BookSerializer


class PlainBookViewSet(viewsets.ModelViewSet):
    """Plain DRF: what the mixins are compared with."""

    queryset = Book.objects.order_by("pk")
    serializer_class = PlainBookSerializer
    permission_classes = [permissions.DjangoModelPermissions]


class DocumentViewSet(_Guarded):
    queryset = Document.objects.order_by("pk")
    serializer_class = DocumentSerializer


class LabelViewSet(_Guarded):
    queryset = Label.objects.order_by("pk")
    serializer_class = LabelSerializer
    lookup_value_regex = "[^/]+"


class UUIDBookViewSet(_Guarded):
    queryset = UUIDBook.objects.order_by("pk")
    serializer_class = UUIDBookSerializer


router = routers.DefaultRouter()
router.register("books", BookViewSet)
router.register("plain-books", PlainBookViewSet, basename="plain-book")
router.register("documents", DocumentViewSet)
router.register("labels", LabelViewSet)
router.register("uuid-books", UUIDBookViewSet)
