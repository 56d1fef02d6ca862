"""Web sources under the package's two fetch paths and its identity check.

* :class:`HttpReader` -- the read path's reader (beside
  :class:`~h5sidecar.sources.stores._backends.ObjectStoreReader`): one attempt of one ranged GET,
  failures sorted into the kinds :class:`~h5sidecar.sources.fetch._chunk_fetcher.ChunkFetcher` acts on;
* :class:`HttpStore` -- what the indexer's :class:`~h5sidecar.sources.fetch._pinned.PinnedFetcher`
  sends its pinned GETs to (``get_async`` answers like obstore's: ``.meta`` and
  ``bytes_async()``);
* :func:`http_identity` -- a source's current identity (one one-byte ranged GET).

The requests themselves, redirects and credentials are :mod:`h5sidecar.sources.web._http_client`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from h5sidecar.errors import SourceNotFoundError, SourceReadError, StaleReferenceError
from h5sidecar.references import SourceInfo
from h5sidecar.sources._observed import (
    ObservedIdentity,
    SourceGoneError,
    TransientReadError,
    datetime_ns,
)
from h5sidecar.sources.stores._urls import SourceLocation
from h5sidecar.sources.web._http_client import (
    HttpClient,
    HttpNotFound,
    HttpPreconditionFailed,
    HttpRangeNotSatisfiable,
    HttpResponse,
    HttpTransient,
    http_client,
)

__all__ = ["HttpReader", "HttpStore", "http_identity"]


def _strip(etag: str | None) -> str | None:
    if not etag:
        return None
    return etag.strip().removeprefix("W/").strip('"') or None


def _observed(r: HttpResponse) -> ObservedIdentity:
    when = r.last_modified
    return ObservedIdentity(
        size=r.size,
        etag=_strip(r.etag),
        mtime=None if when is None else when.timestamp(),
        mtime_ns=None if when is None else datetime_ns(when),
    )


class HttpReader:
    """Ranged GETs of web sources for the fetch executor (one attempt each; it retries).

    Parameters
    ----------
    storage_options : mapping, optional
        ``headers``, ``token``, ``netrc``, ``anon`` (see :mod:`h5sidecar.credentials._http_auth`).
    """

    def __init__(self, storage_options: Mapping[str, Any] | None = None) -> None:
        self._options = dict(storage_options or {})
        self._client: HttpClient | None = None

    @property
    def client(self) -> HttpClient:
        """The shared client for these options (built on first use)."""
        if self._client is None:
            self._client = http_client(self._options)
        return self._client

    async def read(self, loc: SourceLocation, start: int, stop: int) -> tuple[bytes, ObservedIdentity]:
        """GET ``[start, stop)``; the response's headers give the object's current identity."""
        try:
            r = await self.client.get_range_async(loc.url, start, stop)
        except HttpNotFound as exc:
            raise SourceGoneError(f"{loc.url} does not exist") from exc
        except HttpPreconditionFailed as exc:
            raise SourceGoneError(str(exc)) from exc
        except HttpRangeNotSatisfiable as exc:
            raise SourceGoneError(f"{loc.url} is now shorter than the referenced range") from exc
        except HttpTransient as exc:
            raise TransientReadError(str(exc)) from exc
        return r.data, _observed(r)

    async def stat(self, loc: SourceLocation) -> ObservedIdentity:
        """The object's current identity: a one-byte ranged GET (signed URLs allow no HEAD)."""
        _, seen = await self.read(loc, 0, 1)
        return seen


class _Result:
    """What :meth:`HttpStore.get_async` returns: obstore's ``GetResult`` surface."""

    def __init__(self, r: HttpResponse) -> None:
        self._data = r.data
        self.meta = {"size": r.size, "e_tag": r.etag, "last_modified": r.last_modified}

    async def bytes_async(self) -> bytes:
        return self._data


class HttpStore:
    """One web source as the indexer's pinned fetcher sees a store.

    ``options`` takes obstore's ``range`` (a ``(start, stop)`` pair), ``if_match`` and
    ``if_unmodified_since``, sent as headers on every hop of the chain.
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.client = http_client(storage_options)

    def __repr__(self) -> str:
        return f"HttpStore({self.url!r})"

    async def get_async(self, path: str, options: Mapping[str, Any]) -> _Result:
        """A ranged GET of the source (``path`` is ignored: one store per source)."""
        start, stop = options["range"]
        headers = {}
        if options.get("if_match"):
            headers["If-Match"] = str(options["if_match"])
        elif options.get("if_unmodified_since") is not None:
            when = options["if_unmodified_since"]
            headers["If-Unmodified-Since"] = when.strftime("%a, %d %b %Y %H:%M:%S GMT")
        try:
            r = await self.client.get_range_async(self.url, start, stop, headers)
        except HttpPreconditionFailed as exc:
            raise StaleReferenceError(
                f"{self.url} changed while it was being read (If-Match failed); index it again "
                "once the archive is done replacing it",
                url=self.url,
            ) from exc
        except HttpNotFound as exc:
            raise SourceNotFoundError(f"{self.url} does not exist (HTTP 404); check the URL") from exc
        return _Result(r)

    def read_range(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (blocking; a companion file of a granule)."""
        if length == 0:
            return b""
        try:
            return self.client.get_range(self.url, offset, offset + length).data
        except HttpNotFound as exc:
            raise SourceNotFoundError(f"{self.url} does not exist (HTTP 404)") from exc
        except (HttpTransient, HttpRangeNotSatisfiable, HttpPreconditionFailed) as exc:
            raise SourceReadError(f"reading {self.url} failed: {exc}", url=self.url) from exc


def http_identity(url: str, storage_options: Mapping[str, Any] | None = None) -> SourceInfo:
    """The current identity of a web source (one one-byte ranged GET, redirects followed).

    Raises
    ------
    SourceNotFoundError
        404 / 410.
    SourceAuthError
        401 / 403.
    SourceReadError
        Anything else.
    """
    client = http_client(storage_options)
    try:
        r = client.get_range(url, 0, 1)
    except HttpNotFound as exc:
        raise SourceNotFoundError(f"{url} does not exist (HTTP 404); check the URL") from exc
    except (HttpTransient, HttpRangeNotSatisfiable, HttpPreconditionFailed) as exc:
        raise SourceReadError(f"reading {url} failed: {exc}; retry later", url=url) from exc
    seen = _observed(r)
    return SourceInfo(url=url, size=seen.size, etag=seen.etag, mtime=seen.mtime,
                      mtime_ns=seen.mtime_ns)  # fmt: skip
