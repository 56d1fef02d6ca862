"""S3 protocol pieces of the benchmark server: errors, ranges, conditions, bodies, listing."""

from __future__ import annotations

import asyncio
import base64
import bisect
import datetime as dt
import hashlib
import os
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from xml.sax.saxutils import escape

from aiohttp import web

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
TMP_PREFIX = ".s3server-"  # in-flight uploads; never listed


class S3Error(Exception):
    """An S3 error response (``code`` as AWS spells it)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Stats:
    """Request and byte counters of one server."""

    def __init__(self) -> None:
        self.ops: Counter[str] = Counter()
        self.bytes_out = self.bytes_in = 0
        self.spans: list[tuple[float, float]] = []  # (arrival, answered) of each request

    def snapshot(self) -> dict[str, object]:
        return {"requests": sum(self.ops.values()), "ops": dict(self.ops),
                "bytes_out": self.bytes_out, "bytes_in": self.bytes_in,
                "in_a_row": in_a_row(self.spans)}


def in_a_row(spans: list[tuple[float, float]]) -> int:
    """The most requests that ran one after another: the largest set of spans none of which
    overlap (earliest end first is optimal).  A client that must wait for one answer before it
    asks the next (a chain of dependent round trips) shows up here; concurrent requests do
    not, so this is the number of first-byte latencies the client's wall time contains at
    least (it is an upper bound on its truly dependent round trips)."""
    count, free_at = 0, float("-inf")
    for start, end in sorted(spans, key=lambda s: s[1]):
        if start >= free_at:
            count, free_at = count + 1, end
    return count


# ---------------------------------------------------------------------------- helpers

def etag(st: os.stat_result) -> str:
    # Not an MD5 of the content (hashing a GB object per HEAD would be slow) but changes
    # whenever the file does, which is all clients and freshness checks rely on.
    return '"' + hashlib.md5(f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}".encode(),
                             usedforsecurity=False).hexdigest() + '"'


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def xml(body: str, status: int = 200) -> web.Response:
    return web.Response(status=status, content_type="application/xml",
                        text='<?xml version="1.0" encoding="UTF-8"?>\n' + body)


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(start, count) of a single ``bytes=`` range; None means "whole object" (S3 ignores
    malformed and multi-range headers); raises 416 when the start is past the end."""
    spec = header.strip()
    if not spec.startswith("bytes=") or "," in spec:
        return None
    first, _, last = spec[6:].partition("-")
    try:
        if not first:  # suffix range: the last N bytes
            n = int(last)
            return (max(size - n, 0), min(n, size)) if n > 0 else None
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
    except ValueError:
        return None
    if start >= size:
        raise S3Error(416, "InvalidRange", f"range start {start} is beyond the object size {size}")
    return (start, end - start + 1) if end >= start else None


def check_conditions(request: web.Request, etag: str, mtime: float) -> None:
    """Conditional GET/HEAD: 412 for If-Match / If-Unmodified-Since, 304 for the others."""
    h = request.headers
    bare = etag.strip('"')
    if "If-Match" in h and h["If-Match"].strip().strip('"') not in ("*", bare):
        raise S3Error(412, "PreconditionFailed", "If-Match does not match the object's ETag")
    if "If-Unmodified-Since" in h and int(mtime) > http_date(h["If-Unmodified-Since"]):
        raise S3Error(412, "PreconditionFailed", "the object was modified since that time")
    if "If-None-Match" in h and h["If-None-Match"].strip().strip('"') in ("*", bare):
        raise S3Error(304, "NotModified", "")
    if "If-Modified-Since" in h and int(mtime) <= http_date(h["If-Modified-Since"]):
        raise S3Error(304, "NotModified", "")


def http_date(value: str) -> float:
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError) as exc:
        raise S3Error(400, "InvalidArgument", f"bad HTTP date {value!r}") from exc


async def read_body(request: web.Request) -> bytes:
    """The object bytes of a PUT, decoding ``aws-chunked`` streaming bodies (botocore sends
    those with trailing checksums); signatures and checksums are not verified."""
    chunked = "aws-chunked" in request.headers.get("Content-Encoding", "") or \
        request.headers.get("x-amz-content-sha256", "").startswith("STREAMING-")
    if not chunked:
        return await request.read()
    parts = []
    while True:
        line = await request.content.readline()
        size = int(line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            break
        parts.append(await request.content.readexactly(size))
        await request.content.readline()  # CRLF after the chunk
    await request.content.read()  # trailers
    return b"".join(parts)


def keys_under(bucket_path: Path, prefix: str) -> list[str]:
    """Sorted keys of a bucket starting with ``prefix`` (walks only the folder it implies)."""
    folder = prefix.rpartition("/")[0]
    if ".." in folder.split("/"):  # never walk outside the bucket
        return []
    base = bucket_path / folder
    keys = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if not d.startswith(TMP_PREFIX)]
        rel = Path(dirpath).relative_to(bucket_path).as_posix()
        head = "" if rel == "." else rel + "/"
        keys += [head + f for f in filenames
                 if not f.startswith(TMP_PREFIX) and (head + f).startswith(prefix)]
    keys.sort()
    return keys


async def send_file(request: web.Request, resp: web.StreamResponse, fobj: object, start: int,
                    count: int) -> None:
    """Zero-copy body: headers are already flushed by prepare(), sendfile writes the rest."""
    loop = asyncio.get_running_loop()
    transport = request.transport
    if transport is None:
        raise ConnectionResetError("client went away")
    try:
        await loop.sendfile(transport, fobj, start, count)  # type: ignore[arg-type]
    except NotImplementedError:  # e.g. TLS transports: fall back to reads
        fobj.seek(start)  # type: ignore[attr-defined]
        await resp.write(fobj.read(count))  # type: ignore[attr-defined]




@dataclass(frozen=True)
class Page:
    """One page of a listing: object keys, rolled-up common prefixes, and where it stopped."""

    keys: list[str]
    prefixes: list[str]
    truncated: bool
    last: str


def list_page(keys: list[str], *, prefix: str, delimiter: str, after: str, max_keys: int,
              resume_rolled_up: bool) -> Page:
    """Page through sorted ``keys`` after ``after``, rolling keys up at ``delimiter``.

    ``resume_rolled_up`` says ``after`` came from a continuation token, so a common prefix
    returned on the previous page must not be returned again.
    """
    i = bisect.bisect_right(keys, after) if after else 0
    if resume_rolled_up and delimiter and after.endswith(delimiter):
        i = bisect.bisect_left(keys, after + "\U0010ffff", i)
    out: list[str] = []
    prefixes: list[str] = []
    last = ""
    while i < len(keys) and len(out) + len(prefixes) < max_keys:
        key = keys[i]
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:  # roll up everything below this common prefix
            last = key[: cut + len(delimiter)]
            prefixes.append(last)
            i = bisect.bisect_left(keys, last + "\U0010ffff", i)
            continue
        out.append(key)
        last = key
        i += 1
    return Page(out, prefixes, i < len(keys), last)


def render_listing(bucket: str, page: Page, stats: dict[str, os.stat_result], *, prefix: str,
                   delimiter: str, v2: bool, token: str | None, url_encode: bool) -> str:
    """The ListBucketResult XML of a page (V2 with continuation tokens, else V1 markers)."""
    name = (lambda k: urllib.parse.quote(k, safe="/")) if url_encode else escape
    n = len(page.keys) + len(page.prefixes)
    body = [f'<ListBucketResult xmlns="{NS}"><Name>{escape(bucket)}</Name>',
            f"<Prefix>{name(prefix)}</Prefix><MaxKeys>1000</MaxKeys>",
            f"<IsTruncated>{str(page.truncated).lower()}</IsTruncated>"]
    if delimiter:
        body.append(f"<Delimiter>{name(delimiter)}</Delimiter>")
    if url_encode:
        body.append("<EncodingType>url</EncodingType>")
    if v2:
        body.append(f"<KeyCount>{n}</KeyCount>")
        if token:
            body.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
        if page.truncated:
            nxt = base64.urlsafe_b64encode(page.last.encode()).decode()
            body.append(f"<NextContinuationToken>{nxt}</NextContinuationToken>")
    elif page.truncated:
        body.append(f"<NextMarker>{name(page.last)}</NextMarker>")
    for key in page.keys:
        st = stats[key]
        body.append(f"<Contents><Key>{name(key)}</Key><LastModified>{iso(st.st_mtime)}"
                    f"</LastModified><ETag>{escape(etag(st))}</ETag><Size>{st.st_size}</Size>"
                    "<StorageClass>STANDARD</StorageClass></Contents>")
    body += [f"<CommonPrefixes><Prefix>{name(p)}</Prefix></CommonPrefixes>"
             for p in page.prefixes]
    return "".join(body) + "</ListBucketResult>"
