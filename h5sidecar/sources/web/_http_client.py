"""Ranged GETs of web sources (``https://``, and ``http://``), with Earthdata-style auth.

One :class:`HttpClient` per set of options (cached, bounded): a urllib3 connection pool used
from worker threads, so it is bound to no event loop (zarr's loop and fsspec's loop share it,
as they share obstore's clients).  Each request follows redirects itself rather than letting
the library do it, because each hop decides its own headers:

* a hop leaves the source's origin only for an allowed host, and reaches an address inside the
  network only when that host is named exactly (:mod:`h5sidecar.sources.web._hops`), checked before
  connecting to it;
* the ``Range`` (and ``If-Match``) header is kept on every hop;
* credentials go only where :class:`~h5sidecar.credentials._http_auth.HttpAuth` says (the token to the
  source's origin, ``.netrc`` basic auth to the hosts it names);
* cookies set on a hop are kept per origin and sent back to that origin only (Earthdata's login
  hands a session cookie to the data host);
* the final URL of a chain that ended elsewhere (a signed S3 URL) is cached per source for
  :data:`SIGNED_URL_SECONDS`, so later ranged GETs skip the chain; a 401/403 or 400 from a cached
  URL (it expired) drops it and resolves the chain again.

Every answer's ``Content-Range`` and body length are checked against the range asked for
before its bytes are used (:mod:`h5sidecar.sources.web._content_range`).

The source's identity comes from the response's headers (``ETag``, ``Content-Range`` total or
``Content-Length``, ``Last-Modified``); a ``stat`` is a one-byte ranged GET, not a HEAD, because
signed URLs are signed for GET only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import urljoin, urlsplit

import urllib3

from h5sidecar.credentials import HttpAuth, origin_of, secure_for_credentials
from h5sidecar.errors import SourceAuthError, SourceReadError
from h5sidecar.sources.web._content_range import expected_part, slice_part
from h5sidecar.sources.web._hops import REDIRECT_HOSTS_ENV, RedirectPolicy

__all__ = [
    "HttpClient",
    "HttpNotFound",
    "HttpPreconditionFailed",
    "HttpRangeNotSatisfiable",
    "HttpResponse",
    "HttpTransient",
    "http_client",
]

#: Hops followed before a chain counts as a redirect loop.
MAX_REDIRECTS = 10
#: How long the final (signed) URL of a redirect chain is reused for a source, in seconds;
#: Earthdata's signed S3 URLs live an hour, and an expired one is resolved again anyway.
SIGNED_URL_SECONDS = 600.0
#: Sources whose final URL is remembered at once (least recently used go first).
MAX_SIGNED_URLS = 4096
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_RETRYABLE = frozenset({408, 425, 429})


class HttpNotFound(FileNotFoundError):
    """404 / 410 at the end of the chain (internal)."""


class HttpPreconditionFailed(Exception):
    """412: the object no longer matches ``If-Match`` (internal)."""


class HttpRangeNotSatisfiable(OSError):
    """416: the object is shorter than the range (internal; "status code: 416" for callers
    that parse it)."""


class HttpTransient(ConnectionError):
    """A failure a later attempt may not see: 5xx, 408/429, resets, timeouts (internal)."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """The body of a ranged GET and the object's identity from its headers."""

    data: bytes
    size: int
    etag: str | None
    last_modified: Any  # datetime or None


class HttpClient:
    """Ranged GETs of web sources with redirects, credentials and cookies (see the module
    docstring).  Thread-safe; use :func:`http_client` to share one per set of options.

    Parameters
    ----------
    storage_options : mapping, optional
        ``headers``, ``token``, ``netrc``, ``anon`` (see :mod:`h5sidecar.credentials._http_auth`).
    timeout : float
        Seconds to connect, and between bytes of an answer.
    """

    def __init__(self, storage_options: Mapping[str, Any] | None = None, *,
                 timeout: float = 60.0) -> None:  # fmt: skip
        self.auth = HttpAuth(storage_options)
        self.redirects = RedirectPolicy.from_env(self.auth.netrc_hosts)
        self._pool = urllib3.PoolManager(num_pools=16, maxsize=32, block=False,
                                         timeout=urllib3.Timeout(connect=min(timeout, 30.0),
                                                                 read=timeout))  # fmt: skip
        self._lock = threading.Lock()
        self._cookies: dict[str, dict[str, str]] = {}
        self._signed: OrderedDict[str, tuple[str, float]] = OrderedDict()
        #: requests sent (every hop counts), for tests and budgets
        self.requests = 0

    def __repr__(self) -> str:
        return f"HttpClient({self.auth.describe()})"

    def __reduce__(self) -> Any:
        raise TypeError("an HttpClient holds credentials and connections: do not pickle it")

    # -- public ---------------------------------------------------------------------------------
    def get_range(self, url: str, start: int, stop: int,
                  headers: Mapping[str, str] | None = None) -> HttpResponse:  # fmt: skip
        """GET bytes ``[start, stop)`` of the source ``url`` (blocking), following redirects.

        Raises
        ------
        SourceAuthError
            401/403: credentials are missing or refused.
        HttpNotFound, HttpPreconditionFailed, HttpRangeNotSatisfiable, HttpTransient
            404/410, 412, 416 and retryable failures, for the caller to translate.
        SourceReadError
            Any other failure retrying cannot fix (a redirect loop, another 4xx, a server that
            ignores ``Range``, an answer holding another range than asked for: see
            :mod:`h5sidecar.sources.web._content_range`).
        """
        extra = {"Range": f"bytes={start}-{stop - 1}", **(headers or {})}
        resp, _final = self._resolve(url, extra)
        keep = False
        try:
            if resp.status != 206:
                # a server that ignores Range sends the whole object (200): refused before it
                # is read, as a granule may be gigabytes and the range a few bytes of it
                raise SourceReadError(
                    f"GET {url} answered HTTP {resp.status} instead of 206 with the requested "
                    "byte range; h5sidecar reads web sources with Range requests only: use a "
                    "server (or another URL of the archive) that supports them",
                    url=url,
                )
            part = expected_part(url, start, stop, resp.headers)  # before reading the body
            # one byte more than promised shows a body longer than its Content-Range
            body = resp.read(amt=part.length + 1)
            data = slice_part(url, start, stop, part, body)
            keep = True
        except urllib3.exceptions.HTTPError as exc:
            raise HttpTransient(f"reading the answer of GET {url} failed: {type(exc).__name__}") from exc
        finally:
            if not keep:
                resp.close()  # a body not read to its end must not reach the next request
            resp.release_conn()
        return _response(resp, part.total, data)

    async def get_range_async(self, url: str, start: int, stop: int,
                              headers: Mapping[str, str] | None = None) -> HttpResponse:  # fmt: skip
        """:meth:`get_range` in a worker thread (any event loop)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_threads(), self.get_range, url, start, stop, headers)

    def forget(self, url: str) -> None:
        """Drop the cached final URL of ``url`` (the next GET resolves the chain again)."""
        with self._lock:
            self._signed.pop(url, None)

    # -- the redirect chain ---------------------------------------------------------------------
    def _resolve(self, url: str, extra: Mapping[str, str]) -> tuple[Any, str]:
        """Send GET through the chain; the response at its end (unread) and its URL."""
        source_origin = origin_of(url)
        target = self._cached(url)
        cached = target is not None
        target = target or url
        for _hop in range(MAX_REDIRECTS + 1):
            resp = self._send(target, extra, source_origin)
            self._keep_cookies(target, resp)
            if resp.status in _REDIRECTS:
                location = resp.headers.get("Location")
                resp.drain_conn()
                resp.release_conn()
                target = self._next_hop(url, target, location)
                self.redirects.check(url, source_origin, target)  # before connecting to it
                continue
            if cached and resp.status in (400, 401, 403, 404):
                # the cached signed URL expired (S3 answers 400 or 403): resolve the chain again
                resp.drain_conn()
                resp.release_conn()
                self.forget(url)
                cached, target = False, url
                continue
            if resp.status in (200, 206) and target != url and not cached:
                self._remember(url, target)
            if resp.status >= 400:
                self._raise_for(url, target, resp)
            return resp, target
        raise SourceReadError(
            f"GET {url} was redirected more than {MAX_REDIRECTS} times (a redirect loop; with "
            "Earthdata this happens when the login's cookie is refused): check the credentials "
            "and that the URL is a data URL",
            url=url,
        )

    def _send(self, target: str, extra: Mapping[str, str], source_origin: str) -> Any:
        headers = {**extra, **self.auth.headers_for(target, source_origin)}
        cookie = self._cookie_header(target)
        if cookie:
            headers["Cookie"] = cookie
        with self._lock:
            self.requests += 1
        try:
            return self._pool.request("GET", target, headers=headers, redirect=False,
                                      retries=False, preload_content=False)  # fmt: skip
        except urllib3.exceptions.HTTPError as exc:
            # the exception's text names the URL (a signed URL carries its signature): keep out
            raise HttpTransient(
                f"GET {_public(target)} failed before an answer: {type(exc).__name__}"
            ) from None

    def _next_hop(self, url: str, current: str, location: str | None) -> str:
        if not location:
            raise SourceReadError(f"GET {url}: a redirect without a Location header", url=url)
        nxt = urljoin(current, location)
        scheme = urlsplit(nxt).scheme.lower()
        if scheme not in ("https", "http"):
            raise SourceReadError(
                f"GET {url} was redirected to a {scheme or 'relative'}:// URL; only http(s) "
                "redirects are followed", url=url,
            )  # fmt: skip
        if current.lower().startswith("https://") and not secure_for_credentials(nxt):
            raise SourceReadError(
                f"GET {url} was redirected from https:// to plain http:// on "
                f"{origin_of(nxt)}; refusing the downgrade",
                url=url,
            )
        return nxt

    def _raise_for(self, url: str, target: str, resp: Any) -> None:
        status = resp.status
        resp.drain_conn()
        resp.release_conn()
        where = "" if origin_of(target) == origin_of(url) else f" (at {origin_of(target)})"
        if status in (401, 403):
            raise SourceAuthError(
                f"GET {url} was refused with HTTP {status}{where}: credentials are missing or "
                f"not accepted (configured: {self.auth.describe()}). Set EARTHDATA_TOKEN (or "
                "pass storage_options={'token': ...}), or add 'machine LOGIN_HOST login USER "
                "password PASS' to ~/.netrc (or the file NETRC names), and check that the "
                "account may download this collection",
                url=url,
            )
        if status in (404, 410):
            raise HttpNotFound(f"GET {url}: no such object (HTTP {status}){where}")
        if status == 412:
            raise HttpPreconditionFailed(f"{url} changed (If-Match failed)")
        if status == 416:
            raise HttpRangeNotSatisfiable(f"GET {url}: status code: 416 (range not satisfiable)")
        if status >= 500 or status in _RETRYABLE:
            raise HttpTransient(f"GET {url}: HTTP {status}{where}")
        raise SourceReadError(
            f"GET {url} failed with HTTP {status}{where}; retrying will not help: check the URL",
            url=url,
        )

    # -- cookies and signed URLs ------------------------------------------------------------------
    def _keep_cookies(self, target: str, resp: Any) -> None:
        values = resp.headers.getlist("Set-Cookie") if hasattr(resp.headers, "getlist") else []
        if not values:
            return
        origin = origin_of(target)
        with self._lock:
            jar = self._cookies.setdefault(origin, {})
            for value in values:
                try:
                    parsed = SimpleCookie(value)
                except CookieError:
                    continue  # a cookie we cannot parse is a cookie we do not send back
                for name, morsel in parsed.items():
                    if morsel["max-age"] == "0" or not morsel.value:
                        jar.pop(name, None)
                    else:
                        jar[name] = morsel.value

    def _cookie_header(self, target: str) -> str:
        with self._lock:
            jar = self._cookies.get(origin_of(target))
            return "; ".join(f"{k}={v}" for k, v in jar.items()) if jar else ""

    def _cached(self, url: str) -> str | None:
        with self._lock:
            hit = self._signed.get(url)
            if hit is None:
                return None
            if time.monotonic() - hit[1] > SIGNED_URL_SECONDS:
                del self._signed[url]
                return None
            self._signed.move_to_end(url)
            return hit[0]

    def _remember(self, url: str, final: str) -> None:
        with self._lock:
            self._signed[url] = (final, time.monotonic())
            self._signed.move_to_end(url)
            while len(self._signed) > MAX_SIGNED_URLS:
                self._signed.popitem(last=False)


def _public(url: str) -> str:
    """``url`` without its query (signatures and tokens live there)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _response(resp: Any, total: int | None, data: bytes) -> HttpResponse:
    assert total is not None  # expected_part refused an answer without the object's size
    headers = resp.headers
    modified = headers.get("Last-Modified")
    try:
        when = parsedate_to_datetime(modified) if modified else None
    except (TypeError, ValueError):
        when = None
    return HttpResponse(data=data, size=total, etag=headers.get("ETag"), last_modified=when)


# -- shared clients and threads ------------------------------------------------------------------
_CLIENTS: OrderedDict[str, HttpClient] = OrderedDict()
_CLIENTS_LOCK = threading.Lock()
_MAX_CLIENTS = 16
_THREADS: ThreadPoolExecutor | None = None


def _threads() -> ThreadPoolExecutor:
    global _THREADS
    with _CLIENTS_LOCK:
        if _THREADS is None:
            _THREADS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="h5sidecar-http")
        return _THREADS


def http_client(storage_options: Mapping[str, Any] | None = None) -> HttpClient:
    """The shared :class:`HttpClient` for these options (cookies and signed URLs are shared by
    every reader of the process that uses the same options)."""
    # the variables HttpAuth and the redirect policy read are part of the key: a changed token
    # (or list of redirect hosts) means another client
    env = [os.environ.get(k) for k in ("EARTHDATA_TOKEN", "NETRC", "HOME", REDIRECT_HOSTS_ENV)]
    key = hashlib.sha256(
        json.dumps([dict(storage_options or {}), env], sort_keys=True, default=str).encode()
    ).hexdigest()
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is not None:
            _CLIENTS.move_to_end(key)
            return client
    client = HttpClient(storage_options)
    with _CLIENTS_LOCK:
        client = _CLIENTS.setdefault(key, client)
        while len(_CLIENTS) > _MAX_CLIENTS:
            _CLIENTS.popitem(last=False)
    return client


def clear_http_clients() -> None:
    """Forget every shared client (cookies, signed URLs), e.g. after changing credentials."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()


def _after_fork() -> None:
    # a forked child must not share the parent's pooled sockets, nor its (stopped) threads
    global _THREADS, _CLIENTS_LOCK
    _CLIENTS_LOCK = threading.Lock()
    _CLIENTS.clear()
    _THREADS = None


os.register_at_fork(after_in_child=_after_fork)
