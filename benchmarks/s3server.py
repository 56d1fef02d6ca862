"""A fast local S3-compatible endpoint serving a folder, for benchmarks.

Each subfolder of ``root`` is a bucket, each file below it an object (key = relative path).
Path-style addressing only; any credentials (or none) are accepted and never checked.  The
server binds 127.0.0.1 only.

Implemented: ListBuckets, Create/Head/DeleteBucket, ListObjectsV2 (and V1) with prefix,
delimiter, max-keys, start-after and continuation tokens, Head/GetObject with ``Range``
(206 + ``Content-Range``, 416), ``ETag``/``Last-Modified`` and the conditional headers
(``If-Match``/``If-Unmodified-Since`` -> 412, ``If-None-Match``/``If-Modified-Since`` -> 304),
single PutObject (also ``aws-chunked`` bodies), DeleteObject and DeleteObjects.  Object bodies
go out with ``sendfile`` (zero copy).  Multipart upload and copy answer 501: copy large files
into the folder instead.

Every S3 request waits ``latency_ms`` before it is answered (a first-byte latency like a
cloud object store's, without blocking other requests).  Counters (requests per operation,
bytes sent and received) are served as JSON at ``GET /_admin/stats`` and zeroed by
``POST /_admin/reset``; they are not delayed and not counted.

Usage::

    python benchmarks/s3server.py ROOT [--port 0] [--latency-ms 20]

or, from a benchmark script, ``url, stop = start_server(root, latency_ms=20)``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

from aiohttp import web

if __package__:
    from benchmarks import _s3proto as proto
    from benchmarks._s3upstream import Upstream
else:  # run as a script: python benchmarks/s3server.py
    import _s3proto as proto  # type: ignore[no-redef]
    from _s3upstream import Upstream  # type: ignore[no-redef]

HOST = "127.0.0.1"
SMALL_BODY = 1 << 20  # bodies up to this size are copied, larger ones sent with sendfile
# bucket sub-resources this server does not implement (a GET without them is a listing)
SUBRESOURCES = {"acl", "cors", "lifecycle", "policy", "tagging", "versioning", "versions",
                "website", "logging", "notification", "replication", "encryption"}


# ---------------------------------------------------------------------------- the server

class S3Server:
    """The aiohttp application: routing, listing, objects."""

    def __init__(self, root: Path, latency_ms: float = 0.0, *, request_cost_ms: float = 0.0,
                 max_concurrent: int = 0, upstream: str | None = None) -> None:
        self.root = root.resolve()
        self.latency = latency_ms / 1000.0
        self.cost = request_cost_ms / 1000.0
        # requests served at once (the rest queue), like an object store's per-client limits
        self.slots = asyncio.Semaphore(max_concurrent) if max_concurrent else None
        self.upstream = Upstream(upstream) if upstream else None
        self.stats = proto.Stats()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=5 * 2**30)
        app.router.add_get("/_admin/stats", self.admin_stats)
        app.router.add_post("/_admin/reset", self.admin_reset)
        app.router.add_route("*", "/{path:.*}", self.dispatch)
        return app

    async def admin_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats.snapshot())

    async def admin_reset(self, request: web.Request) -> web.Response:
        snap = self.stats.snapshot()
        self.stats = proto.Stats()
        return web.json_response(snap)

    def _bucket(self, name: str, must_exist: bool = True) -> Path:
        if not name or name.startswith(".") or "/" in name:
            raise proto.S3Error(400, "InvalidBucketName", f"invalid bucket name {name!r}")
        path = self.root / name
        if must_exist and not path.is_dir():
            raise proto.S3Error(404, "NoSuchBucket", f"bucket {name!r} does not exist")
        return path

    def _object(self, bucket: str, key: str) -> Path:
        parts = key.split("/")
        if not key or any(p in ("", ".", "..") for p in parts[:-1]) or parts[-1] in (".", ".."):
            raise proto.S3Error(400, "InvalidArgument", f"unsupported key {key!r}")
        return self._bucket(bucket) / key

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            if self.slots is None:
                return await self._serve(request)
            async with self.slots:  # the per-request cost is paid one slot at a time
                await asyncio.sleep(self.cost)
                return await self._serve(request)
        finally:
            self.stats.spans.append((arrived, time.monotonic()))

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        if self.upstream is not None:
            return await self.upstream.forward(request, self.stats)
        bucket, _, key = request.match_info["path"].partition("/")
        q, m = request.query, request.method
        try:
            if "uploads" in q or "uploadId" in q or "x-amz-copy-source" in request.headers:
                raise proto.S3Error(501, "NotImplemented", "multipart upload and copy are not "
                                    "supported by this test server; copy files into its folder")
            if not bucket:
                return self._count("ListBuckets", self.list_buckets())
            if not key:
                return await self._bucket_op(request, bucket)
            if m in ("GET", "HEAD"):
                return await self.get_object(request, bucket, key)
            if m == "PUT":
                return self._count("PutObject", await self.put_object(request, bucket, key))
            if m == "DELETE":
                self._object(bucket, key).unlink(missing_ok=True)
                return self._count("DeleteObject", web.Response(status=204))
            raise proto.S3Error(405, "MethodNotAllowed", f"{m} is not allowed on an object")
        except proto.S3Error as err:
            self.stats.ops[f"error_{err.status}"] += 1
            if m == "HEAD" or err.status == 304:
                return web.Response(status=err.status)
            return proto.xml(f"<Error><Code>{err.code}</Code><Message>{escape(err.message)}"
                             f"</Message><Resource>{escape(request.path)}</Resource><RequestId>"
                             f"{uuid.uuid4().hex}</RequestId></Error>", err.status)

    def _count(self, op: str, response: web.StreamResponse) -> web.StreamResponse:
        self.stats.ops[op] += 1
        return response

    async def _bucket_op(self, request: web.Request, bucket: str) -> web.StreamResponse:
        m, q = request.method, request.query
        if m == "PUT":
            self._bucket(bucket, must_exist=False).mkdir(exist_ok=True)
            return self._count("CreateBucket", web.Response())
        path = self._bucket(bucket)
        if m == "HEAD":
            return self._count("HeadBucket", web.Response())
        if m == "DELETE":
            if any(path.iterdir()):
                raise proto.S3Error(409, "BucketNotEmpty", f"bucket {bucket!r} is not empty")
            path.rmdir()
            return self._count("DeleteBucket", web.Response(status=204))
        if m == "POST" and "delete" in q:
            return self._count("DeleteObjects", await self.delete_objects(request, bucket))
        if m == "GET" and "location" in q:
            location = proto.xml(f'<LocationConstraint xmlns="{proto.NS}"/>')
            return self._count("GetBucketLocation", location)
        if m == "GET" and not set(q) & SUBRESOURCES:
            return self._count("ListObjectsV2" if q.get("list-type") == "2" else "ListObjects",
                               self.list_objects(path, bucket, q))
        raise proto.S3Error(501, "NotImplemented",
                            f"bucket operation {m} {sorted(q)} is not supported")

    def list_buckets(self) -> web.Response:
        buckets = "".join(
            f"<Bucket><Name>{escape(p.name)}</Name><CreationDate>{proto.iso(p.stat().st_mtime)}"
            "</CreationDate></Bucket>"
            for p in sorted(self.root.iterdir()) if p.is_dir() and not p.name.startswith("."))
        return proto.xml(f'<ListAllMyBucketsResult xmlns="{proto.NS}"><Owner><ID>local</ID>'
                         f"</Owner><Buckets>{buckets}</Buckets></ListAllMyBucketsResult>")

    def list_objects(self, path: Path, bucket: str, q: dict[str, str]) -> web.Response:
        """ListObjectsV2 (``list-type=2``) or V1: sorted keys, common prefixes, pagination."""
        v2 = q.get("list-type") == "2"
        prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
        token = q.get("continuation-token")
        after = (base64.urlsafe_b64decode(token).decode() if token else
                 q.get("start-after", "") if v2 else q.get("marker", ""))
        page = proto.list_page(proto.keys_under(path, prefix), prefix=prefix, delimiter=delim,
                               after=after, max_keys=min(int(q.get("max-keys", 1000)), 1000),
                               resume_rolled_up=bool(token))
        stats = {key: (path / key).stat() for key in page.keys}
        return proto.xml(proto.render_listing(
            bucket, page, stats, prefix=prefix, delimiter=delim, v2=v2, token=token,
            url_encode=q.get("encoding-type") == "url"))

    async def get_object(self, request: web.Request, bucket: str, key: str
                         ) -> web.StreamResponse:
        """HEAD/GET of an object; ranged GETs are answered 206.

        Small bodies go out with the headers in one write (``pread``); large ones with
        ``sendfile`` (zero copy), whose per-call setup costs more than copying a few KiB.
        """
        path = self._object(bucket, key)
        head = request.method == "HEAD"
        try:
            # a local open() is microseconds; not worth a thread hop per request
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise proto.S3Error(404, "NoSuchKey",
                                f"no object {key!r} in bucket {bucket!r}") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # folders are prefixes, not objects
                raise proto.S3Error(404, "NoSuchKey", f"no object {key!r} in bucket {bucket!r}")
            tag = proto.etag(st)
            proto.check_conditions(request, tag, st.st_mtime)
            rng = proto.parse_range(request.headers.get("Range", ""), st.st_size) \
                if "Range" in request.headers and not head else None
            start, count = rng if rng else (0, st.st_size)
            headers = {"ETag": tag, "Accept-Ranges": "bytes", "Content-Type": "binary/octet-stream",
                       "Last-Modified": formatdate(st.st_mtime, usegmt=True)}
            if rng:
                headers["Content-Range"] = f"bytes {start}-{start + count - 1}/{st.st_size}"
            status = 206 if rng else 200
            self.stats.ops["HeadObject" if head else "GetObject"] += 1
            if not head:
                self.stats.bytes_out += count
            if not head and count <= SMALL_BODY:
                return web.Response(status=status, headers=headers,
                                    body=os.pread(fd, count, start))
            resp = web.StreamResponse(status=status, headers=headers)
            resp.content_length = count
            await resp.prepare(request)
            if not head and count:
                with os.fdopen(os.dup(fd), "rb") as fobj:
                    await proto.send_file(request, resp, fobj, start, count)
            await resp.write_eof()
            return resp
        finally:
            os.close(fd)

    async def put_object(self, request: web.Request, bucket: str, key: str) -> web.Response:
        path = self._object(bucket, key.rstrip("/"))
        body = await proto.read_body(request)
        self.stats.bytes_in += len(body)
        if key.endswith("/"):  # a "directory marker": folders exist implicitly here
            path.mkdir(parents=True, exist_ok=True)
            return web.Response()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f"{proto.TMP_PREFIX}{uuid.uuid4().hex}"
        tmp.write_bytes(body)
        os.replace(tmp, path)  # atomic: readers never see a partial object
        return web.Response(headers={"ETag": proto.etag(path.stat())})

    async def delete_objects(self, request: web.Request, bucket: str) -> web.Response:
        doc = ET.fromstring(await request.read())
        keys = [el.text or "" for el in doc.iter() if el.tag.split("}")[-1] == "Key"]
        for key in keys:
            self._object(bucket, key).unlink(missing_ok=True)
        deleted = "".join(f"<Deleted><Key>{escape(k)}</Key></Deleted>" for k in keys)
        return proto.xml(f'<DeleteResult xmlns="{proto.NS}">{deleted}</DeleteResult>')


# ---------------------------------------------------------------------------- running it

async def serve(root: Path, port: int, latency_ms: float,
                ready: Callable[[str], None], **options: Any) -> None:
    """Serve until cancelled; ``ready(url)`` is called once the socket listens.  ``options``
    go to :class:`S3Server` (``request_cost_ms``, ``max_concurrent``, ``upstream``)."""
    runner = web.AppRunner(S3Server(root, latency_ms, **options).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port, backlog=1024)
    await site.start()
    bound = runner.addresses[0][1]
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # stop() sends SIGTERM: shut down cleanly
        loop.add_signal_handler(sig, done.set)
    ready(f"http://{HOST}:{bound}")
    try:
        await done.wait()
    finally:
        await runner.cleanup()


def start_server(root: str | Path, latency_ms: float = 0.0, *, port: int = 0,
                 request_cost_ms: float = 0.0, max_concurrent: int = 0,
                 upstream: str | None = None) -> tuple[str, Callable[[], None]]:
    """Start the server in a child process (so it never competes for the caller's GIL).

    ``request_cost_ms`` and ``max_concurrent`` make it a costly endpoint (see ``--help``);
    ``upstream`` makes it a proxy in front of another S3 endpoint.  Returns ``(url, stop)``;
    call ``stop()`` to terminate it.
    """
    extra = ["--request-cost-ms", str(request_cost_ms), "--max-concurrent", str(max_concurrent)]
    if upstream:
        extra += ["--upstream", upstream]
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), str(root), "--port", str(port),
         "--latency-ms", str(latency_ms), *extra], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("http://"):
        proc.kill()
        raise RuntimeError(f"the S3 test server did not start (said {line!r})")

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()

    return line, stop


def _admin(url: str, path: str, method: str = "GET") -> dict[str, object]:
    # no proxies: the server is on 127.0.0.1 and must be reached directly
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urllib.request.Request(url + path, method=method), timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def get_stats(url: str) -> dict[str, object]:
    """Counters since the last reset: ``requests``, ``ops`` (per operation), ``bytes_out``
    (object bytes sent), ``bytes_in`` (object bytes received), ``in_a_row`` (the most requests
    that ran one after another, see :func:`_s3proto.in_a_row`)."""
    return _admin(url, "/_admin/stats")


def reset_stats(url: str) -> dict[str, object]:
    """Zero the counters; returns their values before the reset."""
    return _admin(url, "/_admin/reset", "POST")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root", type=Path, help="folder to serve; each subfolder is a bucket")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    p.add_argument("--latency-ms", type=float, default=0.0,
                   help="delay before answering each S3 request (default 0)")
    p.add_argument("--request-cost-ms", type=float, default=0.0,
                   help="time each request holds one of --max-concurrent slots (default 0)")
    p.add_argument("--max-concurrent", type=int, default=0,
                   help="requests served at once, the rest wait for a slot (default 0: no "
                        "limit, no cost)")
    p.add_argument("--upstream", default=None, metavar="URL",
                   help="forward every S3 request to this endpoint (e.g. a moto server) "
                        "instead of serving ROOT; latency, cost and counters still apply")
    args = p.parse_args(argv)
    if not args.root.is_dir():
        p.error(f"{args.root} is not a folder")
    asyncio.run(serve(args.root, args.port, args.latency_ms, lambda url: print(url, flush=True),
                      request_cost_ms=args.request_cost_ms, max_concurrent=args.max_concurrent,
                      upstream=args.upstream))


if __name__ == "__main__":
    main()
