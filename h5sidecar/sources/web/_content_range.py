"""What a ranged GET's answer must hold before its bytes are used: the range it names, checked.

HTTP lets a server answer ``Range: bytes=a-b`` with another range than the one asked for, as
long as ``Content-Range`` says which (RFC 9110, 14.4 and 15.3.7); a misconfigured or hostile
server may also say one range and send another.  Taking the body as the bytes asked for would
then serve wrong values without any error (a shift of 4 bytes turns ``lat`` ``[-89, -87, -85]``
into ``[-87, -85, -83]``).  So every 206 is checked here before its body is read:

* ``Content-Range`` must be present and exactly ``bytes FIRST-LAST/TOTAL``;
* the range it names must cover the bytes asked for (clipped to ``TOTAL``: a shorter object
  answers the bytes it still has, and the caller's identity check calls it stale);
* a range larger than asked for (a superset) is sliced, up to :data:`MAX_EXTRA_BYTES` (or the
  size asked for) more; anything else (another start, a subset) is refused;
* the body must be exactly as long as the range it names (``Content-Length`` too, when sent);
* a ``multipart/byteranges`` answer (several parts) is refused.

Refusals are :class:`~h5sidecar.errors.SourceReadError`: a server that answers another range
than it was asked for answers it again, so retrying would not help.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from h5sidecar.errors import SourceReadError

__all__ = ["MAX_EXTRA_BYTES", "ContentRange", "expected_part", "parse_content_range", "slice_part"]

#: A superset is read and sliced when it exceeds the range asked for by at most this many bytes
#: or by the range's own length, whichever is larger (servers that round to blocks); a larger
#: one is refused before its body is read.
MAX_EXTRA_BYTES = 8 * 2**20

_CONTENT_RANGE = re.compile(r"bytes ([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19}|\*)")


@dataclass(frozen=True, slots=True)
class ContentRange:
    """The byte range ``[start, stop)`` a response holds, of an object of ``total`` bytes."""

    start: int
    stop: int
    total: int | None

    @property
    def length(self) -> int:
        """Bytes in the range."""
        return self.stop - self.start


def parse_content_range(value: str | None) -> ContentRange | None:
    """The range of a ``Content-Range: bytes FIRST-LAST/TOTAL`` header (``TOTAL`` may be
    ``*``), or ``None`` when absent or malformed (``LAST`` before ``FIRST``, past ``TOTAL``)."""
    match = _CONTENT_RANGE.fullmatch((value or "").strip())
    if match is None:
        return None
    first, last, total = match.groups()
    start, stop = int(first), int(last) + 1
    size = None if total == "*" else int(total)
    if stop <= start or (size is not None and stop > size):
        return None
    return ContentRange(start, stop, size)


def expected_part(url: str, start: int, stop: int, headers: Mapping[str, str]) -> ContentRange:
    """The range a 206 answer to ``Range: bytes=start-(stop-1)`` holds, checked against the
    request before its body is read (see the module docstring).

    Raises
    ------
    SourceReadError
        Several parts, no or a malformed ``Content-Range``, no total, a range that does not
        cover ``[start, stop)``, a superset too large, or a ``Content-Length`` that disagrees.
    """
    asked = f"bytes {start}-{stop - 1}"
    if (headers.get("Content-Type") or "").lower().startswith("multipart/byteranges"):
        raise _refused(url, asked, "several ranges (multipart/byteranges) instead of one")
    value = headers.get("Content-Range")
    got = parse_content_range(value)
    if got is None:
        why = "no Content-Range" if not value else f"a malformed Content-Range {value[:80]!r}"
        raise _refused(url, asked, why)
    if got.total is None:
        raise SourceReadError(
            f"GET {url} gave no object size (no Content-Range total); h5sidecar needs servers "
            "that answer Range requests with it",
            url=url,
        )
    want = min(stop, got.total)
    if start >= got.total or got.start > start or got.stop < want:
        raise _refused(url, asked, f"another range, {_text(got)}")
    if got.length - (want - start) > max(MAX_EXTRA_BYTES, want - start):
        raise _refused(url, asked, f"a range far larger than asked for, {_text(got)}")
    length = headers.get("Content-Length")
    if length is not None and length.strip() != str(got.length):
        raise _refused(url, asked, f"{_text(got)} with a Content-Length of {length[:40]}")
    return got


def slice_part(url: str, start: int, stop: int, got: ContentRange, body: bytes) -> bytes:
    """Bytes ``[start, stop)`` (clipped to the object's size) of the body of ``got``.

    Raises
    ------
    SourceReadError
        The body is not exactly as long as ``got`` says.
    """
    if len(body) != got.length:
        raise _refused(url, f"bytes {start}-{stop - 1}",
                       f"{_text(got)} with a body of {len(body)} bytes")  # fmt: skip
    assert got.total is not None  # expected_part refused a range without a total
    lo, hi = start - got.start, min(stop, got.total) - got.start
    return body if (lo, hi) == (0, len(body)) else body[lo:hi]


def _text(got: ContentRange) -> str:
    return f"'bytes {got.start}-{got.stop - 1}/{'*' if got.total is None else got.total}'"


def _refused(url: str, asked: str, what: str) -> SourceReadError:
    return SourceReadError(
        f"GET {url} asked for {asked} and was answered {what}; refusing bytes that may not be "
        "the ones asked for. The server (or a proxy or CDN in front of it) mishandles Range "
        "requests: read the source from another URL of the archive",
        url=url,
    )
