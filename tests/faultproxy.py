"""A small fault-injecting HTTP/1.1 proxy for tests (asyncio, 127.0.0.1 only).

It sits in front of the moto S3 server: clients use ``proxy.url`` as their endpoint, the proxy
forwards each request upstream and relays the answer -- unless a queued fault says otherwise:

``"slowdown"``  503 with the S3 ``SlowDown`` error body (throttling)
``"500"``       500 ``InternalError``
``"403"``       403 ``AccessDenied`` (not retryable)
``"reset"``     the connection is dropped (TCP RST) without an answer
``"truncate"``  the upstream headers (true ``Content-Length``) but only half the body, then close
``"short"``     a 206 whose ``Content-Length`` and body are both cut to half: looks complete
``"hang"``      never answers (until the client or the proxy closes the connection)
``"shift"``     asks upstream for the range 4 bytes later and relays its honest 206
``"superset"``  asks upstream for 4 more bytes on each side and relays its honest 206
``"relabel"``   relays the bytes asked for, with a ``Content-Range`` 4 bytes earlier
``"whole"``     drops the ``Range`` header and relays the 200 with the whole object
``"long"``      a 206 whose ``Content-Length`` and body both have 4 bytes more than the range

Faults are consumed by the next matching requests (``proxy.inject("reset", times=2)``).  Every
request is recorded (method, path, Range header, fault applied) so tests can count exactly what
reached the server, and the peak number of requests in flight is tracked.  ``proxy.delay``
(seconds) holds every request that long before it is forwarded: requests a client sends
together are then surely in flight together (``peak_in_flight`` counts a round of them).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self
from urllib.parse import urlsplit

__all__ = ["FaultProxy", "Recorded"]

FAULTS = ("slowdown", "500", "403", "reset", "truncate", "short", "hang", "shift", "superset",
          "relabel", "whole", "long")

_ERROR_BODIES = {
    "slowdown": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "500": (500, "Internal Server Error", "InternalError", "We encountered an internal error."),
    "403": (403, "Forbidden", "AccessDenied", "Access Denied"),
}


@dataclass(frozen=True)
class Recorded:
    """One request seen by the proxy."""

    method: str
    path: str
    range: str | None
    fault: str | None
    query: str = ""  # the target's query string (a listing's prefix and delimiter)


class _Fault:
    def __init__(self, kind: str, times: int, match: Callable[[Recorded], bool] | None) -> None:
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; choose from {FAULTS}")
        self.kind, self.left, self.match = kind, times, match


class FaultProxy:
    """Run the proxy on its own thread (use as a context manager).

    Parameters
    ----------
    upstream : str
        ``http://127.0.0.1:PORT`` of the real server.
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.hostname != "127.0.0.1":
            raise ValueError("the fault proxy only forwards to 127.0.0.1")
        self._up = ("127.0.0.1", int(parts.port or 80))
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.delay = 0.0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.url = ""

    # -- control -------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        )
        self._server = fut.result(timeout=10)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        async def _close() -> None:
            assert self._server is not None
            self._server.close()
            # closing the client connections ends each handler at its next read (EOF)
            for w in list(self._writers):
                w.close()
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if handlers:
                _, pending = await asyncio.wait(handlers, timeout=1)
                for t in pending:  # "hang" handlers never end on their own
                    t.cancel()
                if pending:
                    await asyncio.wait(pending, timeout=5)

        asyncio.run_coroutine_threadsafe(_close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def inject(
        self, kind: str, *, times: int = 1, match: Callable[[Recorded], bool] | None = None
    ) -> None:
        """Apply fault ``kind`` to the next ``times`` requests (that satisfy ``match``)."""
        with self._lock:
            self._faults.append(_Fault(kind, times, match))

    def clear(self) -> None:
        """Forget queued faults and recorded requests."""
        with self._lock:
            self._faults.clear()
            self.requests.clear()
            self.peak_in_flight = 0

    def gets(self) -> list[Recorded]:
        """The GET requests seen so far."""
        with self._lock:
            return [r for r in self.requests if r.method == "GET"]

    def _take_fault(self, rec: Recorded) -> str | None:
        with self._lock:
            for f in self._faults:
                if f.left > 0 and (f.match is None or f.match(rec)):
                    f.left -= 1
                    return f.kind
        return None

    # -- serving -------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                method, target, headers = _parse_request_head(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                probe = Recorded(method, urlsplit(target).path, headers.get("range"), None)
                fault = self._take_fault(probe)
                rec = Recorded(probe.method, probe.path, probe.range, fault,
                               urlsplit(target).query)  # fmt: skip
                with self._lock:
                    self.requests.append(rec)
                    self.in_flight += 1
                    self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                try:
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    keep = await self._answer(writer, head, body, fault)
                except ConnectionError:
                    return  # the client gave up on this request (e.g. a cancelled fetch)
                finally:
                    with self._lock:
                        self.in_flight -= 1
                if not keep:
                    return
        finally:
            self._writers.discard(writer)
            if not writer.is_closing():
                writer.close()

    async def _answer(
        self, writer: asyncio.StreamWriter, head: bytes, body: bytes, fault: str | None
    ) -> bool:
        """Answer one request; False when the connection must be closed afterwards."""
        if fault == "reset":
            sock = writer.get_extra_info("socket")
            # SO_LINGER 0 makes close() send RST instead of FIN: a genuine "connection reset"
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if fault == "hang":
            # a stalled server: the client's timeout must act (cancelled when the proxy exits)
            await asyncio.Event().wait()
        if fault in _ERROR_BODIES:
            writer.write(_error_response(*_ERROR_BODIES[fault]))
            await writer.drain()
            return True
        status_line, headers, payload = await self._forward(_moved_range(head, fault), body)
        if fault == "relabel":
            headers = [(k, _moved_content_range(v, -4) if k.lower() == "content-range" else v)
                       for k, v in headers]  # fmt: skip
        if head.startswith(b"HEAD "):
            # a HEAD answer carries the object's length but no body: relay it untouched
            length = int({k.lower(): v for k, v in headers}.get("content-length", "0"))
            writer.write(_response_head(status_line, headers, length))
            await writer.drain()
            return True
        if fault == "truncate":
            writer.write(_response_head(status_line, headers, len(payload)))
            writer.write(payload[: len(payload) // 2])
            await writer.drain()
            writer.close()
            return False
        if fault == "short":
            payload = payload[: len(payload) // 2]
        elif fault == "long":
            payload += b"\0\0\0\0"
        writer.write(_response_head(status_line, headers, len(payload)) + payload)
        await writer.drain()
        return True

    async def _forward(
        self, head: bytes, body: bytes
    ) -> tuple[bytes, list[tuple[str, str]], bytes]:
        up_reader, up_writer = await asyncio.open_connection(*self._up)
        try:
            up_writer.write(_with_connection_close(head) + body)
            await up_writer.drain()
            raw = await up_reader.read()
        finally:
            up_writer.close()
        return _parse_response(raw)


def _parse_request_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return method, target, headers


def _moved_range(head: bytes, fault: str | None) -> bytes:
    """The request head with its Range moved as ``fault`` asks (or dropped)."""
    if fault not in ("shift", "superset", "whole"):
        return head
    lines = head.decode("latin-1").split("\r\n")
    out = []
    for ln in lines:
        if ln.lower().startswith("range:"):
            if fault == "whole":
                continue
            first, _, last = ln.split("=", 1)[1].strip().partition("-")
            a, b = int(first), int(last)
            a, b = (a + 4, b + 4) if fault == "shift" else (max(a - 4, 0), b + 4)
            ln = f"Range: bytes={a}-{b}"
        out.append(ln)
    return "\r\n".join(out).encode("latin-1")


def _moved_content_range(value: str, by: int) -> str:
    span, _, total = value.removeprefix("bytes ").partition("/")
    first, _, last = span.partition("-")
    return f"bytes {int(first) + by}-{int(last) + by}/{total}"


def _with_connection_close(head: bytes) -> bytes:
    lines = head.decode("latin-1").split("\r\n")
    kept = [ln for ln in lines[1:] if ln and not ln.lower().startswith("connection:")]
    return "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")


def _parse_response(raw: bytes) -> tuple[bytes, list[tuple[str, str]], bytes]:
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = [tuple(s.strip() for s in ln.split(":", 1)) for ln in lines[1:] if ":" in ln]
    names = {k.lower(): v for k, v in headers}
    if names.get("transfer-encoding", "").lower() == "chunked":
        rest = _dechunk(rest)
    elif "content-length" in names:
        rest = rest[: int(names["content-length"])]
    return lines[0].encode("latin-1"), headers, rest  # type: ignore[return-value]


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return bytes(out)


_HOP = {"connection", "transfer-encoding", "content-length", "keep-alive"}


def _response_head(status_line: bytes, headers: list[tuple[str, str]], length: int) -> bytes:
    kept = [f"{k}: {v}" for k, v in headers if k.lower() not in _HOP]
    lines = [status_line.decode("latin-1"), *kept, f"Content-Length: {length}", "", ""]
    return "\r\n".join(lines).encode("latin-1")


def _error_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode("latin-1")
    return head + body
