"""Reading the conditional request headers occupy's HTTP side answers: the ``ETag``
of a row (:func:`etag_for`), ``If-Match`` and ``If-None-Match`` (:func:`parse_if_match`,
:func:`tag_version`) and the ``wait`` of ``Prefer`` (:func:`preferred_wait`).

Invariants: ETags are strong, ``"<version>"``, derived from the version alone;
``If-Match`` is read with Django's :func:`~django.utils.http.parse_etags` (comma lists
and weak tags accepted), and text that is no ETag list is refused
(:class:`~occupy.MalformedPrecondition`, a 400), never ignored; numbers in headers are
read with bounds (an entity tag over :data:`MAX_VERSION_DIGITS` digits is refused,
never handed to ``int()``).
"""

from __future__ import annotations

from django.utils.http import parse_etags, parse_header_parameters
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from occupy.exceptions import MalformedPrecondition

__all__ = [
    "ANY",
    "MAX_VERSION_DIGITS",
    "MAX_WAIT_DIGITS",
    "etag_for",
    "parse_if_match",
    "preferred_wait",
    "tag_version",
]

#: ``If-Match: *``: any current representation matches.
ANY = "*"
#: The most digits a version in an entity tag may have (a 64-bit number has 20).
MAX_VERSION_DIGITS = 20


def etag_for(version: int | None) -> str | None:
    """Return the strong ETag of a row at ``version`` (``"7"``), or ``None``."""
    return None if version is None else f'"{int(version)}"'


def parse_if_match(header: str, *, name: str = "If-Match") -> list[str]:
    """Return the entity tags of an ``If-Match`` header (or another precondition
    header: ``name``, for the messages), or ``[ANY]`` for ``*``.

    Raise :class:`MalformedPrecondition` for text that is not a list of entity tags
    (an unquoted version, a stray comma): a client that means a precondition must not
    have it silently dropped.
    """
    tags = parse_etags(header)
    parts = [part for part in header.split(",") if part.strip()]
    if not parts or (tags != [ANY] and len(tags) != len(parts)):
        raise MalformedPrecondition(
            _("%(header)s must be '*' or a list of entity tags such as '\"3\"', not %(value)s.")
            % {"header": name, "value": _shown(header)}
        )
    for tag in tags:
        opaque = tag.removeprefix("W/").strip('"')
        if opaque.isascii() and opaque.isdigit() and len(opaque) > MAX_VERSION_DIGITS:
            raise MalformedPrecondition(
                ngettext(
                    "%(header)s names a version of %(digits)d digit; "
                    "a version has at most %(max)d.",
                    "%(header)s names a version of %(digits)d digits; "
                    "a version has at most %(max)d.",
                    len(opaque),
                )
                % {"header": name, "digits": len(opaque), "max": MAX_VERSION_DIGITS}
            )
    return tags


#: The most digits a ``wait`` preference may have (more is no wait anyone means).
MAX_WAIT_DIGITS = 9


def preferred_wait(header: str | None) -> int | None:
    """Return the seconds of the ``wait`` preference of a ``Prefer`` header (RFC 7240,
    4.3: ``wait=<delta-seconds>``), or ``None`` when it states none.

    Preference names are case-insensitive and the first ``wait`` counts; a ``wait``
    whose value is no whole number of seconds is a preference not understood, which
    RFC 7240 has a server ignore (the request is then answered as if without it).
    """
    for preference in (header or "").split(","):
        main, _params = parse_header_parameters(preference)
        name, _eq, value = main.partition("=")
        if name.strip().lower() != "wait":
            continue
        value = value.strip().strip('"')
        if value.isascii() and value.isdigit() and len(value) <= MAX_WAIT_DIGITS:
            return int(value)
        return None
    return None


def _shown(text: str, limit: int = 80) -> str:
    """Return ``text`` quoted for a message, cut to ``limit`` characters."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}…"


def tag_version(tag: str) -> int | None:
    """Return the version an entity tag names (weak or strong), or ``None`` for a tag
    that is not one of occupy's (it then matches nothing).

    Entity tags compare by their characters (RFC 9110, 8.8.3.2): ``"013"`` is not the
    tag ``"13"`` of version 13, so it names no version."""
    opaque = tag.removeprefix("W/").strip('"')
    if (
        opaque.isascii()
        and opaque.isdigit()
        and len(opaque) <= MAX_VERSION_DIGITS
        and opaque == str(int(opaque))
    ):
        return int(opaque)
    return None
