"""The identity of a source object (size, ETag, modification time; a file's inode and change
time), as sidecars record it.

One HEAD request or ``os.stat``; :class:`~h5sidecar.references.SourceInfo` is what freshness
checks compare (ETag first, then size, a file's inode and ``ctime_ns``, and exact ``mtime_ns``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore

from h5sidecar.errors import SourceNotFoundError, SourceReadError
from h5sidecar.references import SourceInfo
from h5sidecar.sources._observed import datetime_ns
from h5sidecar.sources.stores._store_cache import resolve_store
from h5sidecar.sources.stores._store_errors import STORE_ERRORS, translate_store_error
from h5sidecar.sources.stores._urls import normalize_url

if TYPE_CHECKING:
    from obstore import ObjectMeta

__all__ = ["datetime_ns", "identity_from_meta", "identity_from_stat", "source_identity"]


def _strip_etag(etag: str | None) -> str | None:
    if not etag:
        return None
    etag = etag.strip()
    etag = etag.removeprefix("W/")
    return etag.strip('"') or None


def identity_from_meta(url: str, meta: ObjectMeta) -> SourceInfo:
    """A :class:`SourceInfo` from obstore's ``ObjectMeta`` (of a GET or HEAD response).

    The ETag is recorded without quotes; ``mtime_ns`` is ``last_modified`` in exact integer
    nanoseconds (``mtime`` the same in float seconds).
    """
    modified: datetime | None = meta.get("last_modified")
    return SourceInfo(
        url=url,
        size=int(meta["size"]),
        etag=_strip_etag(meta.get("e_tag")),
        mtime=None if modified is None else modified.timestamp(),
        mtime_ns=None if modified is None else datetime_ns(modified),
    )


def identity_from_stat(
    path: str | os.PathLike[str], st: os.stat_result | None = None
) -> SourceInfo:
    """A :class:`SourceInfo` for a local file from ``os.stat`` (no ETag; inode, change time and
    device beside size and mtime)."""
    absolute = normalize_url(Path(path))
    st = os.stat(absolute) if st is None else st
    return SourceInfo(
        url=absolute,
        size=int(st.st_size),
        etag=None,
        mtime=float(st.st_mtime),
        mtime_ns=int(st.st_mtime_ns),
        inode=int(st.st_ino),
        ctime_ns=int(st.st_ctime_ns),
        device=int(st.st_dev),
    )


def source_identity(
    url: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> SourceInfo:
    """The current identity (size, ETag, mtime) of a source: one HEAD request, or ``os.stat``.

    Parameters
    ----------
    url : str or path-like
    storage_options : mapping, optional
        s3fs-style options (see the module docstring).
    env : mapping, optional
        Environment for ``AWS_*`` variables (default ``os.environ``).

    Raises
    ------
    SourceNotFoundError
        The object does not exist.
    SourceReadError
        The object cannot be reached (the message says why).
    """
    store, location = resolve_store(url, storage_options, env=env)
    if location.kind == "http":
        from h5sidecar.sources.web._http_store import http_identity

        return http_identity(location.url, storage_options)
    if location.kind == "local":
        try:
            return identity_from_stat(location.url)
        except FileNotFoundError as exc:
            raise SourceNotFoundError(f"{location.url} does not exist; check the path") from exc
        except OSError as exc:
            raise SourceReadError(
                f"cannot stat {location.url}: {exc.strerror or exc}; check the path",
                url=location.url,
            ) from exc
    try:
        meta = obstore.head(store, location.path)
    except STORE_ERRORS as exc:
        raise translate_store_error(exc, location.url, "HEAD") from exc
    return identity_from_meta(location.url, meta)
