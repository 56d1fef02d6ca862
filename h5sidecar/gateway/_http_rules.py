"""HTTP-level rules of the gateway that need no web framework: errors and their status codes,
request-path checks, ``Range`` parsing, ETags and the admission gate (503 when saturated).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import unquote, unquote_to_bytes

from h5sidecar.errors import (
    ChunkDecodeError,
    CredentialsError,
    ErrorKind,
    ForbiddenSourceError,
    H5SidecarError,
    IncompatibleGranulesError,
    InvalidReferenceError,
    InvalidRequestError,
    NotHDF5Error,
    NotIndexedError,
    RecordBusyError,
    SourceNotFoundError,
    SourceReadError,
    StaleReferenceError,
    UnsupportedFeatureError,
)

__all__ = [
    "STATUS",
    "Admission",
    "BadRequestError",
    "decode_cursor",
    "encode_cursor",
    "KeyTooLongError",
    "RangeNotSatisfiableError",
    "ResponseTooLargeError",
    "SaturatedError",
    "RecordUnavailableError",
    "WarmingError",
    "accepts_html",
    "check_request_path",
    "etag_of",
    "parse_range",
    "status_for",
]


class BadRequestError(InvalidRequestError):
    """The request path or a parameter is malformed or unsafe (path traversal, bad encoding)."""

    kind = ErrorKind.BAD_REQUEST


class KeyTooLongError(BadRequestError):
    """The request path is longer than ``max_key_length``."""

    kind = ErrorKind.KEY_TOO_LONG


class RangeNotSatisfiableError(H5SidecarError, ValueError):
    """The ``Range`` asks for bytes past the end of the value, or for several ranges."""

    kind = ErrorKind.RANGE_NOT_SATISFIABLE

    def __init__(self, message: str, *, size: int) -> None:
        super().__init__(message)
        self.size = size


class ResponseTooLargeError(H5SidecarError, ValueError):
    """The response would exceed ``max_response_bytes``; ask for a part with ``Range``."""

    kind = ErrorKind.RESPONSE_TOO_LARGE


class SaturatedError(H5SidecarError, OSError):
    """Too many requests wait for an upstream read; retry after ``retry_after`` seconds."""

    kind = ErrorKind.SATURATED

    def __init__(self, message: str, *, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class WarmingError(H5SidecarError, OSError):
    """The gateway is loading DEST's record (its first fill on this machine) and cannot say
    yet whether a granule exists; retry after ``retry_after`` seconds."""

    kind = ErrorKind.WARMING

    def __init__(self, message: str, *, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RecordUnavailableError(WarmingError):
    """Loading DEST's record failed (unreadable, damaged, no permission); it is tried again
    in ``retry_after`` seconds, and the message says why it failed."""

    kind = ErrorKind.RECORD_UNAVAILABLE


#: HTTP status of every error class the gateway answers with, in one table: the first class
#: an error is an instance of wins, so a subclass comes before its bases.  The error classes
#: know nothing of HTTP; this table is the only place statuses are chosen.
STATUS: dict[type[H5SidecarError], int] = {
    KeyTooLongError: 414,
    BadRequestError: 400,
    RangeNotSatisfiableError: 416,
    ResponseTooLargeError: 413,
    SaturatedError: 503,
    RecordUnavailableError: 503,  # loading the record failed; tried again after Retry-After
    WarmingError: 503,  # the record is loading: ask again after Retry-After
    RecordBusyError: 503,  # another process holds DEST's record: a moment later it may not
    NotIndexedError: 404,
    SourceNotFoundError: 404,
    ForbiddenSourceError: 403,
    InvalidReferenceError: 422,
    IncompatibleGranulesError: 422,
    InvalidRequestError: 400,
    UnsupportedFeatureError: 501,
    StaleReferenceError: 409,
    NotHDF5Error: 422,
    SourceReadError: 502,
    CredentialsError: 502,
    ChunkDecodeError: 502,
    H5SidecarError: 500,
}


def status_for(exc: H5SidecarError) -> int:
    """The status code of ``exc`` from :data:`STATUS` (500 for an unlisted class)."""
    for cls, code in STATUS.items():
        if isinstance(exc, cls):
            return code
    return 500


# -- request paths ----------------------------------------------------------------------------
#: Percent-encodings refused anywhere in a raw path: an encoded "/" or "\" would smuggle a
#: separator past routing.  An encoded "%" is allowed: the indexer's escaped names hold "%"
#: (``%2Ezarray``) and the path is decoded once, never again.
_REFUSED_ENCODINGS = ("%2f", "%5c", "%00")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


def encode_cursor(name: str) -> str:
    """The opaque cursor of a page of names that ends with ``name`` (URL-safe)."""
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    """The last name of the page ``cursor`` ends, or :class:`BadRequestError`."""
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError):
        raise BadRequestError(f"cursor {cursor!r} is not one this gateway gave: start again "
                              "without it") from None  # fmt: skip


def check_request_path(raw_path: str, path: str, *, max_length: int) -> None:
    """Refuse unsafe or oversized request paths before any routing.

    Parameters
    ----------
    raw_path : str
        The path as sent (still percent-encoded).
    path : str
        The decoded path.
    max_length : int
        Longest path accepted.

    Raises
    ------
    KeyTooLongError
        Longer than ``max_length``.
    BadRequestError
        ``.``/``..`` segments (in any encoding), backslashes, encoded ``/`` ``\\`` or NUL,
        control characters, or a leading empty segment.  (Later empty segments are merged by
        the app: a store URL written with a trailing ``/`` makes clients send ``G//key``.)
    """
    if len(raw_path) > max_length or len(path) > max_length:
        raise KeyTooLongError(
            f"request path of {len(raw_path)} characters is longer than the limit of "
            f"{max_length} (H5SIDECAR_MAX_KEY_LENGTH)"
        )
    lowered = raw_path.lower()
    if any(enc in lowered for enc in _REFUSED_ENCODINGS):
        raise BadRequestError(
            "request path contains an encoded '/', '\\' or NUL: Zarr keys never need them; "
            "send the key with plain '/' separators"
        )
    try:
        # servers decode invalid UTF-8 to U+FFFD, so an undecodable path would otherwise
        # reach routing as some other (never existing) name and answer 404
        unquote_to_bytes(raw_path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequestError(
            "request path is not valid UTF-8 once percent-decoded (byte "
            f"{exc.object[exc.start:exc.start + 1]!r}): percent-encode UTF-8 names"
        ) from None
    if _CONTROL.search(path):
        raise BadRequestError("request path contains a backslash or a control character")
    segments = path.split("/")[1:]
    # decoded once more too: '%252e%252e' must not pass as a name ('.'/'..' are never names)
    if any(s in (".", "..") or unquote(s) in (".", "..") for s in segments):
        raise BadRequestError("request path contains a '.' or '..' segment (path traversal)")
    if path.startswith("//"):
        # a scheme-relative form ("//host/...") to anything that re-parses it; later empty
        # segments are merged by the app (trailing '/' of a store URL + key)
        raise BadRequestError("request path starts with an empty segment ('//')")


# -- ranges -------------------------------------------------------------------------------------
#: RFC 9110's digits are ASCII only: ``str.isdigit`` also takes superscripts ("²"), which
#: ``int`` refuses.
_DIGITS = re.compile(r"[0-9]+")
#: Any position at least this large lies past the end of every value served.
_HUGE = 2**63


def accepts_html(accept: str) -> bool:
    """Whether an ``Accept`` header asks for HTML (a browser's ``text/html,...`` does, unless
    ``q=0``); ``*/*`` alone does not: curl and scripts get JSON."""
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if media.lower() != "text/html":
            continue
        q = next((v for k, _, v in (p.partition("=") for p in params) if k.lower() == "q"), "1")
        try:
            return float(q) > 0
        except ValueError:  # a malformed weight still names HTML
            return True
    return False


def _position(digits: str) -> int:
    """The number ``digits`` spells, saturated at :data:`_HUGE`: a header of thousands of
    digits is past any end, and ``int()`` refuses strings over 4,300 digits anyway."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) < 19 else _HUGE


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, stop)`` asked for by a ``Range`` header, or ``None`` to send everything.

    Only single byte ranges are served (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``).  Headers in
    another unit or with invalid syntax are ignored, as RFC 9110 asks.  Numbers of any length
    are accepted: a start past the end is refused, an end past the end is clipped.

    Raises
    ------
    RangeNotSatisfiableError
        When the range starts at or past ``size``, is an empty suffix, or lists several ranges.
    """
    if not header:
        return None
    unit, eq, spec = header.partition("=")
    if not eq or unit.strip().lower() != "bytes":
        return None
    spec = spec.strip()
    if "," in spec:
        raise RangeNotSatisfiableError(
            "only a single byte range is served; send one request per range", size=size
        )
    first, dash, last = spec.partition("-")
    first, last = first.strip(), last.strip()
    if not dash or not all(p == "" or _DIGITS.fullmatch(p) for p in (first, last)):
        return None
    if first == "":
        if last == "":
            return None
        n = _position(last)
        if n == 0 or size == 0:
            raise RangeNotSatisfiableError(f"empty suffix range of a {size}-byte value", size=size)
        return max(size - n, 0), size
    start = _position(first)
    if last and _position(last) < start:
        return None
    if start >= size:
        shown = f"{start}" if start < _HUGE else f"{first[:20]}... ({len(first)} digits)"
        raise RangeNotSatisfiableError(
            f"range starts at byte {shown} but the value has {size} bytes", size=size
        )
    stop = size if last == "" else min(_position(last) + 1, size)
    return start, stop


def etag_of(*parts: object) -> str:
    """A strong ETag (quoted) derived from ``parts``."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=12).hexdigest()
    return f'"{digest}"'


# -- admission ----------------------------------------------------------------------------------
class Admission:
    """Bounds requests that read upstream: ``limit`` at once, ``max_pending`` waiting.

    A request that would wait beyond ``max_pending`` others fails at once, and one that waited
    ``wait_timeout`` seconds (or past the ``deadline`` it was given) fails then, with
    :class:`SaturatedError` (503 + ``Retry-After``) instead of piling up until clients time
    out.  Requests answered from memory (metadata, inline chunks, shard indexes, cached chunks)
    never enter the gate.
    """

    def __init__(self, limit: int, max_pending: int, *, wait_timeout: float = 30.0) -> None:
        if limit < 1 or max_pending < 0 or not wait_timeout > 0:
            raise ValueError(
                f"max_upstream must be >= 1, max_pending >= 0 and queue_timeout > 0, got "
                f"{limit}, {max_pending} and {wait_timeout}"
            )
        self.limit = limit
        self.max_pending = max_pending
        self.wait_timeout = wait_timeout
        self.active = 0
        self.waiting = 0
        self._sem: asyncio.Semaphore | None = None

    @asynccontextmanager
    async def slot(self, deadline: float | None = None) -> AsyncIterator[None]:
        """Hold one upstream slot for the duration of the ``async with`` block, waiting for it
        until ``deadline`` (the running loop's ``time()``; default: ``wait_timeout`` from now)."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.limit)
        sem = self._sem
        if sem.locked():
            if self.waiting >= self.max_pending:
                raise SaturatedError(
                    f"the gateway is saturated ({self.active} upstream reads running, "
                    f"{self.waiting} waiting): retry after a second",
                    retry_after=1,
                )
            loop = asyncio.get_running_loop()
            until = loop.time() + self.wait_timeout if deadline is None else deadline
            self.waiting += 1
            try:
                async with asyncio.timeout_at(until):
                    await sem.acquire()
            except TimeoutError as exc:
                raise SaturatedError(
                    f"waited {self.wait_timeout:g} s for an upstream slot ({self.active} "
                    f"upstream reads running, {self.waiting - 1} others waiting): retry later",
                    retry_after=2,
                ) from exc
            finally:
                self.waiting -= 1
        else:
            await sem.acquire()
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
            sem.release()
