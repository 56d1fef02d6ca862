"""A web server on 127.0.0.1 that answers ranged GETs of one file, honestly or in one of the
ways a real server, proxy or CDN gets them wrong (:data:`MODES`).

``mode`` can be changed while it runs (index through an honest server, then read through a
misbehaving one).  Every request's ``Range`` header is recorded.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: How each mode answers ``Range: bytes=a-b`` of an object of ``n`` bytes ([a, b+1) clipped to n).
MODES = {
    "honest": "206, the bytes asked for",
    "whole": "200 with the whole object (Range ignored)",
    "shifted": "206 with the range 4 bytes later, and a Content-Range saying so",
    "superset": "206 with 4 more bytes on each side, and a Content-Range saying so",
    "subset": "206 with the last 4 bytes missing, and a Content-Range saying so",
    "label_earlier": "the bytes asked for, labelled as starting 4 bytes earlier",
    "label_later": "the bytes asked for, labelled as starting 4 bytes later",
    "short_body": "the Content-Range asked for, but a body (and Content-Length) 4 bytes short",
    "long_body": "the Content-Range asked for, but a body (and Content-Length) 4 bytes longer",
    "chunked_long": "the Content-Range asked for, a chunked body 4 bytes longer",
    "total_plus_one": "the bytes asked for, with a Content-Range total one byte larger",
    "no_content_range": "206 and the bytes asked for, without Content-Range",
    "star_total": "206 and the bytes asked for, total '*'",
    "multipart": "206 multipart/byteranges with the range as its one part",
}


@dataclass
class RangesServer:
    """The running server (see the module docstring)."""

    path: Path
    mode: str = "honest"
    port: int = 0
    ranges: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.path.name}"


def _handler(state: RangesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            with state.lock:
                state.ranges.append(self.headers.get("Range"))
                mode = state.mode
            data = state.path.read_bytes()
            n = len(data)
            st = os.stat(state.path)
            head = {"ETag": f'"{st.st_size:x}-{st.st_mtime_ns:x}"', "Accept-Ranges": "bytes"}
            rng = self.headers.get("Range")
            if rng is None or mode == "whole":
                return self._send(200, head, data)
            first, _, last = rng.removeprefix("bytes=").partition("-")
            a, b = int(first), min(int(last) + 1, n)
            if a >= n:
                return self._send(416, {**head, "Content-Range": f"bytes */{n}"}, b"")
            lo, hi, label, total, body = a, b, None, str(n), None
            if mode == "shifted":
                lo, hi = min(a + 4, n - 1), min(b + 4, n)
            elif mode == "superset":
                lo, hi = max(a - 4, 0), min(b + 4, n)
            elif mode == "subset":
                hi = max(b - 4, a + 1)
            elif mode == "label_earlier":
                label = (a - 4, b - 4)
            elif mode == "label_later":
                label = (a + 4, b + 4)
            elif mode == "total_plus_one":
                total = str(n + 1)
            elif mode == "star_total":
                total = "*"
            part = data[lo:hi]
            if mode == "short_body":
                body = part[:-4]
            elif mode in ("long_body", "chunked_long"):
                body = part + b"\0\0\0\0"
            first_b, last_b = label or (lo, hi)
            content_range = f"bytes {first_b}-{last_b - 1}/{total}"
            if mode == "no_content_range":
                return self._send(206, head, part)
            if mode == "multipart":
                sep = "THIS_STRING_SEPARATES"
                payload = (f"--{sep}\r\nContent-Type: application/octet-stream\r\n"
                           f"Content-Range: {content_range}\r\n\r\n").encode() + part + \
                    f"\r\n--{sep}--\r\n".encode()  # fmt: skip
                return self._send(206, {**head, "Content-Type":
                                        f"multipart/byteranges; boundary={sep}"}, payload)  # fmt: skip
            head["Content-Range"] = content_range
            if mode == "chunked_long":
                return self._send_chunked(206, head, body or part)
            return self._send(206, head, part if body is None else body)

        def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _send_chunked(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")

    return Handler


@contextmanager
def ranges_server(path: Path) -> Iterator[RangesServer]:
    """Serve ``path`` at ``http://127.0.0.1:PORT/NAME`` until the block ends."""
    from h5sidecar.sources.web._http_client import clear_http_clients

    state = RangesServer(path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    clear_http_clients()
    try:
        yield state
    finally:
        clear_http_clients()
        server.shutdown()
        server.server_close()
