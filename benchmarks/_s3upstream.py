"""Proxy mode of the benchmark S3 server: forward every request to another S3 endpoint.

Put in front of moto's server (``python -m moto.server``), it makes moto a second, slower
S3 implementation with the same first-byte latency, request cost and counters as
``s3server.py`` serving a folder: moto answers every request (headers, ranges, ETags, errors
its own way) and pays its own per-request cost (Flask/werkzeug, objects copied per request).
"""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web

# hop-by-hop and length headers are the proxy's own business
_SKIP = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive"})


class Upstream:
    """Forwards requests to ``url`` over one pooled aiohttp session."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def forward(self, request: web.Request, stats: Any) -> web.StreamResponse:
        """Send ``request`` upstream and return its answer; counts it in ``stats``."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256), auto_decompress=False)
        body = await request.read()
        stats.bytes_in += len(body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _SKIP}
        async with self._session.request(request.method, self.url + request.path_qs,
                                         headers=headers, data=body or None,
                                         allow_redirects=False) as up:
            data = await up.read()
            out = {k: v for k, v in up.headers.items() if k.lower() not in _SKIP}
            status = up.status
        op = {"GET": "GetObject", "HEAD": "HeadObject", "PUT": "PutObject"}.get(
            request.method, request.method)
        stats.ops[op if request.match_info["path"].count("/") else f"{op} (bucket)"] += 1
        if request.method == "GET":
            stats.bytes_out += len(data)
        if request.method == "HEAD":  # keep moto's Content-Length: the object's size
            return web.Response(status=status, headers=out | {
                "Content-Length": up.headers.get("Content-Length", "0")})
        return web.Response(status=status, headers=out, body=data)
