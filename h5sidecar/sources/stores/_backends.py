"""Byte-range readers under the fetch executor: obstore for object stores, ``os.pread`` for files.

A reader does one attempt of one request and reports what it saw; the executor
(:mod:`h5sidecar.sources.fetch._chunk_fetcher`) owns retries, concurrency and the freshness verdict.  Failures
are sorted here into three internal kinds the executor acts on:

* :class:`TransientReadError` -- throttling (503 SlowDown), other 5xx, 408/429, connection
  resets, timeouts, truncated bodies: worth retrying;
* :class:`SourceGoneError` -- the object does not exist (404) or a precondition failed (412);
* a public :class:`~h5sidecar.errors.SourceReadError` -- anything retrying cannot fix
  (403, 400, bad credentials, an answer holding another byte range than asked for).

obstore checks each ranged answer's status and ``Content-Range`` against the range asked for
(a mismatch is an error naming both ranges), not its body's length: the executor checks that.

obstore was chosen over aiohttp/s3fs by measurement (see the README, "Read path: tuning"): it
spends several times less client CPU per ranged GET, and its client is not bound to an asyncio
loop, so one fetcher serves zarr's loop and fsspec's loop alike.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import obstore
from obstore.exceptions import PermissionDeniedError, PreconditionError, UnauthenticatedError

from h5sidecar.errors import H5SidecarError, SourceReadError
from h5sidecar.sources._observed import (  # re-exported: the readers' shared leaves
    ObservedIdentity,
    SourceGoneError,
    TransientReadError,
    datetime_ns,
)
from h5sidecar.sources.stores._store_cache import resolve_store
from h5sidecar.sources.stores._store_errors import (
    STORE_ERRORS,
    http_status,
    provider_failure,
    range_mismatch,
)
from h5sidecar.sources.stores._urls import SourceLocation

__all__ = [
    "LocalReader",
    "ObjectStoreReader",
    "ObservedIdentity",
    "SourceGoneError",
    "TransientReadError",
    "transient_store_error",
]

#: 4xx codes that mean "try again later" rather than "you asked for something wrong".
_RETRYABLE_4XX = frozenset({408, 429})


#: Threads of local reads: their own pool, so a stuck file system (or a source that is not a
#: regular file) can never take the threads everything else runs ``asyncio.to_thread`` on.
_LOCAL_POOL: ThreadPoolExecutor | None = None


def _local_pool() -> ThreadPoolExecutor:
    global _LOCAL_POOL
    if _LOCAL_POOL is None:
        _LOCAL_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="h5sidecar-pread")
    return _LOCAL_POOL


def drop_queued_reads() -> None:
    """Cancel local reads not started yet and retire the pool (a server shutting down must not
    wait for the queued reads of requests it already cut); the next read starts a new pool."""
    global _LOCAL_POOL
    pool, _LOCAL_POOL = _LOCAL_POOL, None
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


class LocalReader:
    """Reads local files with ``os.pread`` in worker threads (one open/fstat/pread/close each).

    The ``fstat`` is taken on the descriptor that is read, so the identity checked by the
    freshness guard is the identity of the very bytes returned.  Files are opened non-blocking
    and anything but a regular file (a FIFO, a device) is refused before it is read: a FIFO
    would block the reading thread forever.
    """

    async def read(
        self, loc: SourceLocation, start: int, stop: int
    ) -> tuple[bytes, ObservedIdentity]:
        """Read ``[start, stop)`` of the file at ``loc.local_path``."""
        return await self._run(_pread, loc.local_path, start, stop - start)

    async def stat(self, loc: SourceLocation) -> ObservedIdentity:
        """The current identity of the file (no data read)."""
        return await self._run(_stat, loc.local_path)

    async def _run(self, fn: Any, path: str, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(_local_pool(), fn, path, *args)
        except (SourceReadError, SourceGoneError):
            raise  # SourceReadError is an OSError too, but final: not worth retrying
        except FileNotFoundError as exc:
            raise SourceGoneError(f"{path} does not exist") from exc
        except (PermissionError, IsADirectoryError) as exc:
            raise SourceReadError(
                f"cannot read {path}: {exc}; check the file's permissions", url=path
            ) from exc
        except OSError as exc:
            raise TransientReadError(f"reading {path}: {exc}") from exc


def _observed(st: os.stat_result, path: str) -> ObservedIdentity:
    if not stat.S_ISREG(st.st_mode):
        # it was a regular file when indexed: the object the sidecar describes is gone
        raise SourceGoneError(f"{path} is no longer a regular file (a FIFO, device or socket)")
    return ObservedIdentity(size=st.st_size, etag=None, mtime=st.st_mtime,
                            mtime_ns=st.st_mtime_ns, inode=st.st_ino, ctime_ns=st.st_ctime_ns)


def _pread(path: str, offset: int, length: int) -> tuple[bytes, ObservedIdentity]:
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        seen = _observed(os.fstat(fd), path)
        data = os.pread(fd, length, offset)
    finally:
        os.close(fd)
    return data, seen


def _stat(path: str) -> ObservedIdentity:
    return _observed(os.stat(path), path)


class ObjectStoreReader:
    """Ranged GETs through obstore; one store (and connection pool) per bucket or host.

    Parameters
    ----------
    storage_options : mapping, optional
        s3fs-style options (``endpoint_url``, ``key``, ``secret``, ``token``, ``anon``,
        ``client_kwargs={"region_name": ...}``).  Credentials not given here come from the
        environment (``AWS_*`` variables), exactly as obstore and boto resolve them.
    """

    def __init__(self, storage_options: Mapping[str, Any] | None = None) -> None:
        self._options = dict(storage_options or {})
        self._stores: dict[str | None, Any] = {}  # by bucket

    def store_for(self, loc: SourceLocation) -> Any:
        """The obstore store serving ``loc``'s bucket (shared pool; see :mod:`h5sidecar.sources.stores._store_cache`)."""
        store = self._stores.get(loc.bucket)
        if store is None:
            store, _ = resolve_store(loc.url, self._options, retry_config=NO_RETRY)
            self._stores[loc.bucket] = store
        return store

    async def read(
        self, loc: SourceLocation, start: int, stop: int
    ) -> tuple[Any, ObservedIdentity]:
        """GET ``[start, stop)``; the response's headers give the object's current identity."""
        store = self.store_for(loc)
        try:
            result = await obstore.get_async(store, loc.path, options={"range": (start, stop)})
            data = await result.bytes_async()
        except FileNotFoundError as exc:
            raise SourceGoneError(f"{loc.url} does not exist") from exc
        except PreconditionError as exc:
            raise SourceGoneError(f"{loc.url} changed (precondition failed)") from exc
        except (PermissionDeniedError, UnauthenticatedError) as exc:
            raise provider_failure(exc, loc.url) or SourceReadError(
                f"access to {loc.url} was denied: {_first_line(exc)}. Check the "
                "credentials (storage_options or AWS_* environment variables) and the bucket "
                "policy.",
                url=loc.url,
            ) from exc
        except STORE_ERRORS as exc:
            # obstore reports HTTP failures and transport failures (resets, timeouts, truncated
            # bodies) as generic errors; the HTTP status, when there is one, is in the message.
            raise _classify(exc, loc) from exc
        return data, _identity(result.meta)

    async def stat(self, loc: SourceLocation) -> ObservedIdentity:
        """The object's current identity: one HEAD request."""
        store = self.store_for(loc)
        try:
            meta = await obstore.head_async(store, loc.path)
        except FileNotFoundError as exc:
            raise SourceGoneError(f"{loc.url} does not exist") from exc
        except (PermissionDeniedError, UnauthenticatedError) as exc:
            raise provider_failure(exc, loc.url) or SourceReadError(
                f"access to {loc.url} was denied: {_first_line(exc)}. Check the "
                "credentials and the bucket policy.",
                url=loc.url,
            ) from exc
        except STORE_ERRORS as exc:
            raise _classify(exc, loc) from exc
        return _identity(meta)


def _identity(meta: Any) -> ObservedIdentity:
    mtime = meta.get("last_modified")
    return ObservedIdentity(
        size=int(meta["size"]),
        etag=_strip_etag(meta.get("e_tag")),
        mtime=None if mtime is None else mtime.timestamp(),
        mtime_ns=None if mtime is None else datetime_ns(mtime),
    )


def _classify(exc: BaseException, loc: SourceLocation) -> Exception:
    if range_mismatch(exc):
        # obstore checked Content-Range: the server answers other bytes, and would again
        return SourceReadError(
            f"GET {loc.url} was answered with another byte range than the one asked for "
            f"({_first_line(exc)}); refusing bytes that may not be the ones asked for. Check "
            "the endpoint (or the proxy in front of it).",
            url=loc.url,
        )
    status = http_status(exc)
    if status == 416:
        # ranges were checked against the size recorded at index time, so the object shrank
        return SourceGoneError(f"{loc.url} is now shorter than the referenced range")
    if status is not None and 400 <= status < 500 and status not in _RETRYABLE_4XX:
        return SourceReadError(
            f"GET {loc.url} failed with HTTP {status}: {_first_line(exc)}. Retrying will "
            "not help; check the URL, the endpoint and the credentials.",
            url=loc.url,
        )
    what = f"HTTP {status}" if status else type(exc).__name__
    return TransientReadError(f"{what}: {_first_line(exc)}")


def transient_store_error(exc: Exception) -> bool:
    """Whether an obstore failure is worth another attempt: throttling (408/429), 5xx and
    transport failures (resets, timeouts, truncated bodies); not a missing object, a failed
    precondition or denied access.  The same verdict :func:`_classify` gives the read path."""
    final = (H5SidecarError, FileNotFoundError, PreconditionError, PermissionDeniedError,
             UnauthenticatedError)  # fmt: skip
    if not isinstance(exc, STORE_ERRORS) or isinstance(exc, final) or range_mismatch(exc):
        return False
    status = http_status(exc)
    return status is None or status >= 500 or status in _RETRYABLE_4XX


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _strip_etag(etag: str | None) -> str | None:
    if etag is None:
        return None
    etag = etag.strip()
    etag = etag.removeprefix("W/")
    return etag.strip('"')


#: Our executor owns retries (it counts them and applies one policy everywhere), so the obstore
#: client must not retry on its own.
NO_RETRY: dict[str, Any] = {"max_retries": 0}
