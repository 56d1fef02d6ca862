"""One GET of a pinned object: its whole answer within a deadline, and the answer checked.

:class:`~h5sidecar.sources.fetch._pinned.PinnedFetcher` schedules requests into its page cache;
each of them is one GET made here.  A body shorter or longer than the range asked for and an
answer that does not come whole within ``source_request_timeout`` are signals the package's
retry policy retries (:func:`transient`); a response of another size or ETag than the object's
when it was opened is a changed object, never retried (:func:`check_same_object`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import obstore

from h5sidecar.errors import SourceReadError, StaleReferenceError
from h5sidecar.sources._source_identity import identity_from_meta
from h5sidecar.sources.stores._backends import transient_store_error
from h5sidecar.sources.web._http_store import HttpStore

if TYPE_CHECKING:
    from h5sidecar.references import SourceInfo

__all__ = ["ShortRead", "Stalled", "answer", "check_same_object", "stalled_error", "transient"]


async def _get_async(store: Any, path: str, options: dict[str, Any]) -> Any:
    """One GET through obstore, or through a web source's own store."""
    if isinstance(store, HttpStore):
        return await store.get_async(path, options)
    return await obstore.get_async(store, path, options=options)  # type: ignore[arg-type]


class ShortRead(Exception):
    """A body shorter or longer than the range asked for (internal; retried, then a
    SourceReadError)."""


class Stalled(Exception):
    """No whole answer within ``source_request_timeout`` (internal; retried, then a
    SourceReadError)."""


def transient(exc: Exception) -> bool:
    """Whether a failed GET is worth another attempt (short bodies and stalls included)."""
    return isinstance(exc, ShortRead | Stalled) or transient_store_error(exc)


async def answer(store: Any, path: str, options: dict[str, Any], timeout: float) -> Any:
    """One GET and its whole body within ``timeout`` seconds (:class:`Stalled` past it): a
    server that stops answering must cost a retry, not the granule's whole time limit."""
    try:
        async with asyncio.timeout(timeout):
            result = await _get_async(store, path, options)
            return result, bytes(await result.bytes_async())
    except TimeoutError as exc:
        raise Stalled(timeout) from exc


def stalled_error(url: str, exc: Stalled, what: str, retries: int) -> SourceReadError:
    """The error of a GET of ``what`` of ``url`` that stalled ``retries + 1`` times."""
    return SourceReadError(
        f"no answer with {what} of {url} within source_request_timeout="
        f"{exc.args[0]:g} s, {retries + 1} time(s): the server stalls; retry later, "
        "or raise H5SIDECAR_SOURCE_REQUEST_TIMEOUT for a slow link",
        url=url,
    )


def check_same_object(url: str, identity: SourceInfo, meta: Any) -> None:
    """Refuse a response whose size or ETag is not the object's when it was opened.

    Raises
    ------
    StaleReferenceError
        The object changed while it was being read.
    """
    if int(meta["size"]) != identity.size:
        raise StaleReferenceError(
            f"{url} changed size while it was being read; index it again", url=url
        )
    etag = identity_from_meta(url, meta).etag
    if identity.etag is not None and etag != identity.etag:
        # a server that ignores If-Match answers with another version's bytes: refuse them
        raise StaleReferenceError(
            f"{url} changed while it was being read (ETag {etag!r} in a response, "
            f"{identity.etag!r} when it was opened); index it again",
            url=url,
        )
