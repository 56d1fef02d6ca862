"""HTTP semantics of a Zarr key and of an error, without a web framework.

:func:`key_reply` turns a resolved key (:class:`~h5sidecar.gateway.core.Resolved`) and the
request's conditional/range headers into status, headers and body: ``ETag`` and
``If-None-Match`` (304), single ``Range`` (206 / 416), ``HEAD`` without reading the source,
``Cache-Control``, and gzip for metadata documents only (chunk bytes are already compressed,
and gzip would break byte ranges).  :func:`error_reply` maps an error through the one status
table (:data:`~h5sidecar.gateway._http_rules.STATUS`).
"""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass, field

from h5sidecar.errors import H5SidecarError
from h5sidecar.gateway._http_rules import (
    RangeNotSatisfiableError,
    SaturatedError,
    WarmingError,
    parse_range,
    status_for,
)
from h5sidecar.gateway.core import Gateway, Resolved

__all__ = ["GZIP_MIN", "Reply", "error_reply", "key_reply"]

log = logging.getLogger("h5sidecar.gateway")

#: Metadata documents smaller than this are sent uncompressed (gzip would not pay off).
GZIP_MIN = 1024


@dataclass
class Reply:
    """Status, headers and body of an answer (``body=None``: a JSON ``payload`` instead)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    payload: dict[str, str] | None = None


def _etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    return "*" in tags or etag in tags


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)


async def key_reply(
    gw: Gateway,
    res: Resolved,
    *,
    head: bool,
    range_header: str | None,
    if_none_match: str | None,
    accept_encoding: str,
    private: bool,
) -> Reply:
    """The answer to ``GET``/``HEAD`` of one key.

    Raises
    ------
    RangeNotSatisfiableError, ResponseTooLargeError, ForbiddenSourceError, ...
        From range parsing and :meth:`Gateway.read`; :func:`error_reply` answers them.
    """
    meta = res.kind == "metadata"
    headers = {
        "ETag": res.etag,
        "Accept-Ranges": "bytes",
        "Cache-Control": f"{'private' if private else 'public'}, max-age={60 if meta else 86400}",
        "Content-Type": "application/json" if meta else "application/octet-stream",
    }
    if meta:
        headers["Vary"] = "Accept-Encoding"
    if _etag_matches(if_none_match, res.etag):
        return Reply(304, headers)
    span = parse_range(range_header, res.size)
    start, stop = span if span is not None else (0, res.size)
    status = 200 if span is None else 206
    if span is not None:
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{res.size}"
    gz = meta and span is None and res.size >= GZIP_MIN and "gzip" in accept_encoding.lower()
    if gz:
        body = gw.compressed(res, _gzip)
        headers["Content-Encoding"] = "gzip"
    elif head:
        body = b""  # HEAD never reads the source: the size is in the sidecar
        headers["Content-Length"] = str(stop - start)
    else:
        body = await gw.read(res, start, stop)
    if head:
        headers["Content-Length"] = headers.get("Content-Length", str(len(body)))
        body = b""
    return Reply(status, headers, body)


def error_reply(exc: H5SidecarError) -> Reply:
    """The JSON answer to an error: ``{"error": kind, "message": what happened and what to do}``."""
    status = status_for(exc)
    headers: dict[str, str] = {}
    if isinstance(exc, RangeNotSatisfiableError):
        headers["Content-Range"] = f"bytes */{exc.size}"
    if isinstance(exc, SaturatedError | WarmingError):
        headers["Retry-After"] = str(exc.retry_after)
    if status >= 500 and not isinstance(exc, WarmingError):  # the warm-up logs its own state
        log.warning("%s: %s", type(exc).__name__, exc)
    return Reply(status, headers, payload={"error": exc.kind, "message": str(exc)})
