"""An "Earthdata-like" archive on 127.0.0.1: two plain-HTTP servers with Earthdata's auth flows.

* the **data host** ``http://127.0.0.1:A`` serves ``/data/NAME``:

  - with ``Authorization: Bearer TOKEN`` -> 307 to a signed URL on the *login host*
    (``http://localhost:B/signed/NAME?exp=..&sig=..``): the token must not follow;
  - with the session cookie -> 302 to a signed URL on the data host itself;
  - with a wrong bearer token -> 401; with nothing -> 302 to the login host's ``/login``;

* the **login host** ``http://localhost:B`` (another host name, so ``.netrc`` can name it apart):
  ``/login`` wants basic auth (``USER``/``PASSWORD``) and redirects to the data host's
  ``/callback``, which sets the session cookie and redirects back to ``/data/NAME``;
* ``/signed/NAME`` on either host serves the file with ``Range`` (206, ``Content-Range``),
  ``ETag`` (from size and mtime), ``Last-Modified``, ``If-Match`` (412) and 416; an expired or
  forged signature gets 403.

Every request is logged (host, path, headers) so tests can assert who saw which credential.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

USER, PASSWORD = "alice", "pa55-w0rd"


@dataclass
class Seen:
    """One request the archive received."""

    host: str  # "data" or "login"
    path: str
    headers: dict[str, str]


@dataclass
class Archive:
    """The running archive (see the module docstring)."""

    files: dict[str, Path] = field(default_factory=dict)
    token: str = field(default_factory=lambda: "edl-" + secrets.token_hex(8))
    signed_seconds: float = 3600.0
    log: list[Seen] = field(default_factory=list)
    data_port: int = 0
    login_port: int = 0
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    _sessions: set[str] = field(default_factory=set)
    _codes: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def data(self) -> str:
        return f"http://127.0.0.1:{self.data_port}"

    @property
    def login(self) -> str:
        return f"http://localhost:{self.login_port}"

    def url(self, name: str) -> str:
        """The data URL users index."""
        return f"{self.data}/data/{name}"

    def add(self, path: Path, name: str | None = None) -> str:
        self.files[name or path.name] = path
        return self.url(name or path.name)

    def seen(self, host: str | None = None, prefix: str = "") -> list[Seen]:
        with self._lock:
            return [s for s in self.log if (host is None or s.host == host)
                    and s.path.startswith(prefix)]  # fmt: skip

    def sign(self, name: str) -> str:
        exp = str(int(time.time() + self.signed_seconds))
        sig = hmac.new(self._key, f"{name}:{exp}".encode(), hashlib.sha256).hexdigest()
        return f"/signed/{quote(name)}?exp={exp}&sig={sig}"

    def signature_ok(self, name: str, query: dict[str, list[str]]) -> bool:
        exp, sig = query.get("exp", [""])[0], query.get("sig", [""])[0]
        good = hmac.new(self._key, f"{name}:{exp}".encode(), hashlib.sha256).hexdigest()
        return hmac.compare_digest(sig, good) and exp.isdigit() and int(exp) > time.time()


def _handler(archive: Archive, host: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def do_HEAD(self) -> None:
            self._reply(405)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            with archive._lock:
                archive.log.append(Seen(host, parts.path, dict(self.headers.items())))
            query = parse_qs(parts.query)
            if parts.path.startswith("/signed/"):
                return self._signed(parts.path[len("/signed/"):], query)
            if host == "data" and parts.path.startswith("/data/"):
                return self._data(parts.path[len("/data/"):])
            if host == "login" and parts.path == "/login":
                return self._login(query)
            if host == "data" and parts.path == "/callback":
                return self._callback(query)
            return self._reply(404)

        def _reply(self, status: int, headers: dict[str, str] | None = None,
                   body: bytes = b"") -> None:  # fmt: skip
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _data(self, name: str) -> None:
            if name not in archive.files:
                return self._reply(404)
            auth = self.headers.get("Authorization", "")
            cookie = self.headers.get("Cookie", "")
            if auth.startswith("Bearer "):
                if auth != f"Bearer {archive.token}":
                    return self._reply(401, body=b"bad token")
                return self._reply(307, {"Location": archive.login + archive.sign(name)})
            session = dict(p.strip().split("=", 1) for p in cookie.split(";") if "=" in p)
            if session.get("edl_session") in archive._sessions:
                return self._reply(302, {"Location": archive.sign(name)})  # same host
            back = quote(f"/data/{name}", safe="")
            return self._reply(302, {"Location": f"{archive.login}/login?return={back}"})

        def _login(self, query: dict[str, list[str]]) -> None:
            import base64

            expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            if self.headers.get("Authorization") != expected:
                return self._reply(401, {"WWW-Authenticate": 'Basic realm="login"'})
            code = secrets.token_hex(8)
            archive._codes.add(code)
            back = quote(query.get("return", ["/"])[0], safe="")
            return self._reply(302, {"Location": f"{archive.data}/callback?code={code}&return={back}"})

        def _callback(self, query: dict[str, list[str]]) -> None:
            code = query.get("code", [""])[0]
            if code not in archive._codes:
                return self._reply(401)
            archive._codes.discard(code)
            sid = secrets.token_hex(8)
            archive._sessions.add(sid)
            return self._reply(302, {"Location": query.get("return", ["/"])[0],
                                     "Set-Cookie": f"edl_session={sid}; Path=/; HttpOnly"})

        def _signed(self, name: str, query: dict[str, list[str]]) -> None:
            if not archive.signature_ok(name, query) or name not in archive.files:
                return self._reply(403, body=b"<Error>AccessDenied: Request has expired</Error>")
            path = archive.files[name]
            st = os.stat(path)
            etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
            meta = {"ETag": etag, "Last-Modified": formatdate(st.st_mtime, usegmt=True),
                    "Accept-Ranges": "bytes"}  # fmt: skip
            match = self.headers.get("If-Match")
            if match is not None and match.strip() not in (etag, "*"):
                return self._reply(412, meta)
            rng = self.headers.get("Range")
            data = path.read_bytes()
            if rng is None:
                return self._reply(200, meta, data)
            first, _, last = rng.removeprefix("bytes=").partition("-")
            start, stop = int(first), min(int(last) + 1, len(data))
            if start >= len(data):
                return self._reply(416, {**meta, "Content-Range": f"bytes */{len(data)}"})
            meta["Content-Range"] = f"bytes {start}-{stop - 1}/{len(data)}"
            return self._reply(206, meta, data[start:stop])

    return Handler


@pytest.fixture
def earthdata(monkeypatch: pytest.MonkeyPatch) -> Iterator[Archive]:
    """A running Earthdata-like archive (two servers on 127.0.0.1), stopped after the test.

    Its login host (which serves the signed URLs) is an allowed redirect target, as an
    Earthdata user allows the login host and the host of the signed URLs."""
    from h5sidecar.sources.web._http_client import clear_http_clients

    archive = Archive()
    servers = []
    for host in ("data", "login"):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(archive, host))
        server.daemon_threads = True
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    archive.data_port = servers[0].server_address[1]
    archive.login_port = servers[1].server_address[1]
    monkeypatch.setenv("H5SIDECAR_REDIRECT_HOSTS", f"localhost:{archive.login_port}")
    clear_http_clients()
    try:
        yield archive
    finally:
        clear_http_clients()
        for server in servers:
            server.shutdown()
            server.server_close()


def write_netrc(path: Path, host: str = "localhost") -> Path:
    """A ``.netrc`` naming the login host only."""
    path.write_text(f"machine {host} login {USER} password {PASSWORD}\n")
    path.chmod(0o600)
    return path
