"""Opening a sidecar: its identity (the cache key) and its parsed references, through a cache.

:func:`load_refs` is how every reader opens a sidecar (the zarr store, the fsspec filesystem, the
xarray engine, ``read_arrays``, the gateway): parsed once per process and version of the
sidecar, in the shared :data:`~h5sidecar.read._shared_caches.SIDECARS` by default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from h5sidecar.read._byte_lru import ByteLRU
from h5sidecar.read._shared_caches import SIDECARS, fit_shared_caches

__all__ = ["load_refs", "sidecar_identity"]


def sidecar_identity(path: str, storage_options: Mapping[str, Any] | None = None, *,
                     fresh: bool = False) -> tuple:
    """A hashable identity of the sidecar at ``path``: location + size + ETag/mtime.

    For a Parquet sidecar (a directory) the identity is that of its ``.zmetadata``, which the
    writer writes last (its commit marker).  ``fresh``: asked of the store, not of a listing
    the filesystem instance cached (s3fs answers ``info`` from a listing of the folder made
    earlier in the process: a sidecar rewritten since, by another instance, kept its old
    ETag); for a writer that compares it with a recorded one.

    Raises
    ------
    NotIndexedError
        When nothing exists at ``path``.
    """
    import fsspec

    from h5sidecar.credentials import fsspec_options
    from h5sidecar.errors import NotIndexedError

    options = dict(storage_options or {})
    fs, p = fsspec.core.url_to_fs(path, **fsspec_options(str(path), options))
    if fresh:  # the listings that would answer for the sidecar and its .zmetadata
        cached = getattr(fs, "dircache", None)
        if cached is not None:
            for folder in (p.rstrip("/"), fs._parent(p)):
                cached.pop(folder, None)
    try:
        info = _parquet_commit_info(fs, p)
        if info is not None:
            p = f"{p.rstrip('/')}/.zmetadata"
        else:
            info = fs.info(p)
    except FileNotFoundError as exc:
        raise NotIndexedError(
            f"no sidecar at {path!r}: index the granule first (h5sidecar index SOURCE -o DEST) "
            "or check the path and storage options"
        ) from exc
    from h5sidecar.read._sidecar_key import key_from_info

    return key_from_info(fs, p, info, options)


def _parquet_commit_info(fs: Any, path: str) -> dict[str, Any] | None:
    """``info`` of ``path/.zmetadata``, or None when ``path`` is not a Parquet sidecar.

    Asked first (unless the name says JSON): on an object store it is one HEAD, where asking
    about the directory itself costs a HEAD and a listing before that.
    """
    if path.endswith(".json"):
        return None
    try:
        return fs.info(f"{path.rstrip('/')}/.zmetadata")
    except (FileNotFoundError, NotADirectoryError):
        return None


def load_refs(
    path: str | os.PathLike[str],
    storage_options: Mapping[str, Any] | None = None,
    *,
    cache: ByteLRU[Any] | None = SIDECARS,
    identity: tuple | None = None,
) -> Any:
    """Read the sidecar at ``path`` (JSON or Parquet) as ``GranuleRefs``, through ``cache``.

    A Parquet sidecar on an object store that ``cache`` holds no entry for is opened in one
    round of concurrent requests: its identity, ``.zmetadata`` and all-arrays manifests file
    (see :mod:`h5sidecar.read._cold_open`); otherwise its identity is asked first (the key),
    and the sidecar read on a miss.

    Parameters
    ----------
    path : str or path-like
        Local path or URL (``s3://bucket/x.h5.parq``) of the sidecar.
    storage_options : mapping, optional
        fsspec options to read the sidecar (``endpoint_url``, ``key``, ``secret``, ...).
    cache : ByteLRU or None
        Where parsed sidecars are kept (the process-wide :data:`SIDECARS` by default).
    identity : tuple, optional
        ``sidecar_identity(path, storage_options)`` when the caller just asked for it (one
        stat or HEAD less); the cache key.

    Raises
    ------
    NotIndexedError
        When no sidecar exists at ``path``.
    InvalidReferenceError
        When the sidecar is malformed.
    """
    from h5sidecar.references import read_refs

    path = os.fspath(path)
    options = dict(storage_options or {})
    if cache is SIDECARS:
        fit_shared_caches()
    if cache is None:
        return read_refs(path, storage_options=options)
    if identity is None:
        from h5sidecar.read._cold_open import open_cold

        # no entry for this sidecar yet: its identity, metadata and manifests in one round
        cold = open_cold(path, options, cache)
        if cold is not None:
            return cold[1]
    key = identity if identity is not None else sidecar_identity(path, options)
    return cache.get_or_create(key, lambda: read_refs(path, storage_options=options))
