"""The format of the lock keys occupy builds, in one place: built here, read back here.

A row's key is ``"<app_label>.<model_name>:<pk>"`` (:func:`object_key`). Every key fits
in :data:`~occupy.validation.MAX_KEY_LENGTH` characters: a key that would be longer
(a 250-character string primary key) keeps its readable start and ends with
``"~"`` and the first 40 hex digits of the SHA-256 digest of the part it shortens
(:func:`fit`). Such a key is always exactly ``MAX_KEY_LENGTH`` characters long, and a
key of that length that ends like one is always taken for one: a full key that would
look like it is shortened as well, so reading a key back is never ambiguous. Two
different parts share a shortened key only if their digests agree in 160 bits, which
does not happen in practice; the digest is stable (SHA-256 of the part's UTF-8 text).

:func:`parse_object_key` reads a row's key back: the model's label and the primary key
as text, or, for a shortened key, the start of it and its digest (which
:meth:`ObjectKey.matches` checks against a candidate primary key).

Key templates (:class:`KeyTemplate`) are formatted here too, for ``@occupy.lock`` and
for the task integrations: ``"report:{account_id}"`` names parameters of a function,
checked when the template is bound to it, and is formatted with a call's arguments by
name; a call it cannot be formatted with raises ``ValueError`` naming the function and
the template.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from occupy.validation import MAX_KEY_LENGTH, check_key

__all__ = [
    "DIGEST_CHARS",
    "KeyTemplate",
    "ObjectKey",
    "fit",
    "object_key",
    "parse_object_key",
    "template_fields",
]

#: How many hex digits of the SHA-256 digest end a shortened key (160 bits).
DIGEST_CHARS = 40
_TAIL = 1 + DIGEST_CHARS  # "~" and the digits
_SHORTENED = re.compile(rf"~([0-9a-f]{{{DIGEST_CHARS}}})\Z")
_OBJECT_KEY = re.compile(r"([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*):(.+)\Z", re.DOTALL)


def _digest(part: str) -> str:
    return hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def _looks_shortened(key: str) -> bool:
    return len(key) == MAX_KEY_LENGTH and _SHORTENED.search(key) is not None


def fit(prefix: str, part: str) -> str:
    """Return ``prefix + part`` as a key, shortened (see the module docstring) when it
    would be longer than ``MAX_KEY_LENGTH`` characters or look shortened already.

    ``prefix`` is kept whole; it must leave room for the digest and some of ``part``.
    """
    key = prefix + part
    if len(key) <= MAX_KEY_LENGTH and not _looks_shortened(key):
        return key
    room = MAX_KEY_LENGTH - len(prefix) - _TAIL
    if room < 1:
        raise ValueError(
            f"The key prefix {prefix[:40]!r}… is {len(prefix)} characters long; "
            f"at most {MAX_KEY_LENGTH - _TAIL - 1} leave room for a digest."
        )
    return f"{prefix}{part[:room]}~{_digest(part)}"


def object_key(label: str, pk: object) -> str:
    """Return the lock key of the row whose model has label ``label`` (lower case,
    ``"app_label.model_name"``) and whose primary key is ``pk``."""
    return check_key(fit(f"{label}:", str(pk)))


class ObjectKey(NamedTuple):
    """A row's lock key read back by :func:`parse_object_key`."""

    app_label: str
    model_name: str
    #: The primary key as text; for a shortened key, only its start.
    pk_text: str
    #: For a shortened key, the digest its primary key must have (see :func:`matches`);
    #: ``None`` when ``pk_text`` is the whole primary key.
    digest: str | None

    def matches(self, pk: object) -> bool:
        """Return whether ``pk`` is the primary key this key names."""
        text = str(pk)
        if self.digest is None:
            return text == self.pk_text
        return text.startswith(self.pk_text) and _digest(text) == self.digest


def parse_object_key(key: str) -> ObjectKey | None:
    """Return what a key built by :func:`object_key` names, or ``None`` for a key of
    another form (which names no row)."""
    match = _OBJECT_KEY.match(key)
    if match is None:
        return None
    app_label, model_name, pk_text = match.groups()
    if not _looks_shortened(key):
        return ObjectKey(app_label, model_name, pk_text, None)
    return ObjectKey(app_label, model_name, pk_text[:-_TAIL], pk_text[-DIGEST_CHARS:])


def template_fields(template: str) -> set[str]:
    """Return the argument names the key template ``template`` formats (``"{a.b}"``
    and ``"{a[0]}"`` name ``a``); raise ``ValueError`` for a malformed template."""
    names = set()
    for _text, field, _spec, _conv in string.Formatter().parse(template):
        if field is not None:
            names.add(field.split(".", 1)[0].split("[", 1)[0])
    return names


class KeyTemplate:
    """A key template bound to the function whose arguments it formats.

    ``where`` names the function (or the task) in every error. ``skip`` leading
    parameters (a task's ``context``) are not the call's arguments: :meth:`format` is
    given the call without them.
    """

    def __init__(self, template: str, func: Callable[..., Any], *, where: str, skip: int = 0):
        if not isinstance(template, str) or not template:
            raise ValueError(
                f"{where}: the key template must be a non-empty str, not {template!r}."
            )
        try:
            fields = template_fields(template)
        except ValueError as e:
            raise ValueError(f"{where}: the key template {template!r} is malformed: {e}.") from e
        self.template = template
        self.where = where
        self.fields = fields
        self.signature = inspect.signature(inspect.unwrap(func))
        params = list(self.signature.parameters)[skip:]
        self._skip = skip
        missing = fields - set(params)
        if missing:
            raise ValueError(
                f"{where}: the key template {template!r} names {sorted(missing)}, which "
                f"{where} has no parameter for."
            )

    def format(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """Return the key of a call with ``args`` and ``kwargs``; raise ``ValueError``
        (from the cause) naming the function and the template when the call does not
        bind to the function or its arguments do not format."""
        if not self.fields:
            return check_key(self.template)
        try:
            bound = self.signature.bind(*([None] * self._skip), *args, **kwargs)
            bound.apply_defaults()
            key = self.template.format_map(bound.arguments)
        except (TypeError, KeyError, IndexError, AttributeError, ValueError) as e:
            raise ValueError(
                f"{self.where}: the key template {self.template!r} cannot be formatted "
                f"with this call's arguments ({type(e).__name__}: {e})."
            ) from e
        return check_key(key, name=f"{self.where}'s key")
