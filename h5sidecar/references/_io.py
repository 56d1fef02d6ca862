"""Reading and atomically writing sidecars, locally and on object stores (fsspec).

Writers never leave a half-written sidecar where a reader looks:

* **local JSON and Parquet**: written beside the destination, flushed, then renamed or swapped
  in (:mod:`h5sidecar.references._atomic_local`).
* **object stores JSON**: one PUT (objects appear whole).
* **object stores Parquet**: the old ``.zmetadata`` is deleted first, then the record files are
  uploaded, then ``.zmetadata`` -- the commit marker -- last; files the new version does not
  use are deleted afterwards (:mod:`h5sidecar.references._sidecar_files`).  A reader sees "no
  sidecar" during the write, never new records under old metadata.

Existing destinations are only replaced when they look like sidecars; anything else raises
``FileExistsError`` rather than being deleted.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from fsspec.implementations.local import LocalFileSystem

from h5sidecar.errors import InvalidReferenceError, NotIndexedError
from h5sidecar.references._atomic_local import write_local_dir, write_local_file
from h5sidecar.references._model import GranuleRefs
from h5sidecar.references._select import array_matcher, decode_json_sidecar, select_arrays
from h5sidecar.references._sidecar_files import (
    SidecarFiles,
    sidecar_fs,
    write_remote_dir,
)
from h5sidecar.references.json_sidecar._kerchunk_json import encode_json
from h5sidecar.references.parquet_sidecar._kerchunk_parquet import (
    ZMETADATA,
    SidecarLayout,
    bulk_file,
    decode_zmetadata,
    read_parquet_parts,
    sidecar_layout,
)
from h5sidecar.references.parquet_sidecar._manifests_file import MANIFESTS_FILE
from h5sidecar.references.parquet_sidecar._parquet_lazy import BULK_LOAD_BYTES, read_parquet_lazy
from h5sidecar.references.parquet_sidecar._parquet_write import DEFAULT_RECORD_SIZE, encode_parquet

log = logging.getLogger("h5sidecar")

__all__ = [
    "SidecarFormat",
    "SidecarLayout",
    "parquet_refs",
    "read_layout",
    "read_refs",
    "write_json",
    "write_parquet",
    "write_refs",
]

SidecarFormat = Literal["parquet", "json", "dmrpp"]


def write_json(
    refs: GranuleRefs,
    path: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
) -> str:
    """Write ``refs`` as a kerchunk JSON v1 sidecar, atomically.

    Parameters
    ----------
    refs : GranuleRefs
    path : str or path-like
        Local path or fsspec URL (``s3://bucket/granule.h5.json``).
    storage_options : dict, optional
        fsspec options for the destination (``endpoint_url``, credentials, ...).

    Returns
    -------
    str
        The path written.
    """
    fs, root = sidecar_fs(path, storage_options)
    data = encode_json(refs)
    if isinstance(fs, LocalFileSystem):
        write_local_file(Path(root), [data])
    else:
        fs.pipe_file(root, data)  # a single PUT: the object appears whole or not at all
    return str(path)


def write_parquet(
    refs: GranuleRefs,
    path: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    record_size: int = DEFAULT_RECORD_SIZE,
    manifests_file: bool = True,
    layout: SidecarLayout = "kerchunk",
) -> str:
    """Write ``refs`` as a Parquet sidecar directory, atomically.

    Parameters
    ----------
    refs : GranuleRefs
    path : str or path-like
        Local directory or fsspec URL (``s3://bucket/granule.h5.parq``).
    storage_options : dict, optional
        fsspec options for the destination.
    record_size : int
        Chunks per ``refs.N.parq`` file (fsspec's ``LazyReferenceMapper`` loads one record at a
        time, so smaller records mean less to fetch per chunk read, larger ones fewer files).
    manifests_file : bool
        Also write ``.h5sidecar/manifests.parq``, every array's chunk references in one file,
        so h5sidecar readers load all manifests in one GET (default; plain kerchunk readers
        ignore it).  ``False`` writes the kerchunk layout alone.
    layout : "kerchunk" or "compact"
        ``"kerchunk"``: record files per array, readable by plain fsspec/kerchunk (default).
        ``"compact"``: ``.zmetadata`` and ``.h5sidecar/manifests.parq`` only (plus the checksums
        file), two or three objects per granule, readable by h5sidecar only (plain tools fail
        on it with ``KeyError: 'record_size'``; the gateway serves it as Zarr).  Replacing a
        sidecar of the other layout removes its files.

    Returns
    -------
    str
        The path written.
    """
    fs, root = sidecar_fs(path, storage_options)
    files = encode_parquet(
        refs, record_size=record_size, manifests_file=manifests_file, layout=layout
    )
    if isinstance(fs, LocalFileSystem):
        write_local_dir(Path(root), files)
    else:
        write_remote_dir(fs, root, files)
    return str(path)


def write_refs(
    refs: GranuleRefs,
    dest: str | os.PathLike[str],
    *,
    format: SidecarFormat = "parquet",
    storage_options: dict[str, Any] | None = None,
    record_size: int = DEFAULT_RECORD_SIZE,
    layout: SidecarLayout = "kerchunk",
) -> str:
    """Write a sidecar in ``format`` (``"parquet"``, ``"json"`` or ``"dmrpp"``); see the writers.

    ``layout`` applies to Parquet only (a JSON sidecar is always one object).
    """
    if format == "json":
        return write_json(refs, dest, storage_options=storage_options)
    if format == "parquet":
        return write_parquet(
            refs, dest, storage_options=storage_options, record_size=record_size, layout=layout
        )
    if format == "dmrpp":  # a DMR++ document (what it cannot say is left out: logged)
        from h5sidecar.references.dmrpp_sidecar._dmrpp_write import write_dmrpp

        for s in write_dmrpp(refs, os.fspath(dest), storage_options=storage_options):
            log.info("%s: %s left out of the DMR++: %s", dest, s.path, s.reason)
        return os.fspath(dest)
    raise ValueError(f"format must be 'parquet', 'json' or 'dmrpp', got {format!r}")


def read_refs(
    path: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    lazy: bool = True,
    arrays: str | Iterable[str] | None = None,
) -> GranuleRefs:
    """Read a sidecar (ours or kerchunk's) in either format.

    A directory (or prefix) holding ``.zmetadata`` is read as Parquet, anything else as JSON.
    Sidecars without h5sidecar extras get ``SourceInfo(url=<first chunk URL>, size=-1)``.

    Parameters
    ----------
    path : str or path-like
        Local path or fsspec URL of the sidecar.
    storage_options : dict, optional
        fsspec options to read it.
    lazy : bool
        For Parquet sidecars written by h5sidecar: read ``.zmetadata`` only (one GET) and load
        each array's record files when its manifest is first used (``arr.manifest``), once,
        into a byte-bounded cache.  For JSON sidecars written by h5sidecar: parse the file
        (one GET) but build each array's manifest from its references when first used (an
        analysis naming a few arrays of a thousand skips ~0.2 ms an array).  ``False``
        builds every manifest now (and so validates the whole sidecar up front).  Sidecars
        written by kerchunk are always read whole.
    arrays : str or iterable of str, optional
        Array paths or shell-style patterns (``"*/heights/h_ph"``; ``*`` matches ``/`` too):
        the result holds only the arrays they match, and only those arrays' metadata is
        decoded (what a task that reads a few named arrays of a large granule needs; see
        :mod:`h5sidecar.references._select`).  For a Parquet sidecar the all-arrays manifests
        file is fetched together with ``.zmetadata`` (two concurrent GETs instead of two in a
        row; a file over ``BULK_LOAD_BYTES`` is not kept).  Never write the result back as the
        granule's sidecar: it lacks the other arrays.

    Raises
    ------
    NotIndexedError
        Nothing is at ``path``.
    InvalidReferenceError
        The sidecar is malformed, truncated or inconsistent (for a lazy Parquet sidecar, record
        files are checked when they are loaded).
    """
    fs, root = sidecar_fs(path, storage_options)
    order = ("json", "parquet") if root.endswith(".json") else ("parquet", "json")
    match = None if arrays is None else array_matcher(arrays)
    for kind in order:
        try:
            if kind == "parquet":
                zmeta_bytes, bulk = _zmetadata_and_bulk(fs, root, lazy and match is not None)
                return parquet_refs(path, storage_options, zmeta_bytes, bulk, lazy=lazy,
                                    match=match, fs=fs, root=root)  # fmt: skip
            if not root.endswith(".json"):
                # a granule, a netCDF-3 file or one record file passed by mistake: say so from
                # its first bytes instead of downloading it whole to fail as JSON
                _refuse_non_sidecar(fs, root, path, fs.cat_file(root, start=0, end=len(_HEAD)))
            data = fs.cat_file(root, start=0)
            return _checked(decode_json_sidecar(data, lazy=lazy, match=match))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            continue
    raise NotIndexedError(
        f"no sidecar at {path}: neither a JSON file nor a directory with {ZMETADATA}; "
        "index the granule first (h5sidecar index)"
    )


def parquet_refs(
    path: str | os.PathLike[str],
    storage_options: dict[str, Any] | None,
    zmeta_bytes: bytes,
    bulk: bytes | None,
    *,
    lazy: bool = True,
    match: Any = None,
    fs: Any = None,
    root: str | None = None,
) -> GranuleRefs:
    """The Parquet sidecar at ``path`` from its ``.zmetadata`` bytes, already fetched (the
    record files are read later, or now when not ``lazy``).

    ``bulk``: its all-arrays manifests file when fetched with ``.zmetadata``; dropped (fetched
    again when first needed) unless its size is the one ``.zmetadata`` records, so a file of
    another version of the sidecar is not decoded against this metadata.
    """
    zmeta = decode_zmetadata(zmeta_bytes)
    if bulk is not None and len(bulk) != bulk_file(zmeta):
        bulk = None
    files = SidecarFiles(os.fspath(path), storage_options, fs=fs, root=root)
    refs = read_parquet_lazy(zmeta, files, match=match, bulk_data=bulk) if lazy else None
    if refs is None:
        refs = read_parquet_parts(zmeta, files)
        refs = refs if match is None else select_arrays(refs, match)
    return _checked(refs)


def _zmetadata_and_bulk(fs: Any, root: str, with_bulk: bool) -> tuple[bytes, bytes | None]:
    """A Parquet sidecar's ``.zmetadata``, and when ``with_bulk`` its all-arrays manifests
    file fetched concurrently (None when absent or larger than ``BULK_LOAD_BYTES``, which a
    lazy open would not read whole either)."""
    meta_path = f"{root}/{ZMETADATA}"
    if not with_bulk:
        # start=0: one GET, without the HEAD s3fs sends before a whole-object read
        return fs.cat_file(meta_path, start=0), None
    got = fs.cat_ranges([meta_path, f"{root}/{MANIFESTS_FILE}"], [0, 0],
                        [None, BULK_LOAD_BYTES + 1], on_error="return")
    if isinstance(got[0], BaseException):
        raise got[0]
    bulk = got[1]
    if isinstance(bulk, FileNotFoundError) or (
        isinstance(bulk, bytes) and len(bulk) > BULK_LOAD_BYTES
    ):
        return got[0], None
    if isinstance(bulk, BaseException):
        raise bulk
    return got[0], bulk


def read_layout(
    path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
) -> SidecarLayout | None:
    """The layout of the Parquet sidecar at ``path`` (one small read of its ``.zmetadata``),
    or None when ``path`` is not a Parquet sidecar (a JSON sidecar, nothing).

    Raises
    ------
    InvalidReferenceError
        When the ``.zmetadata`` is malformed.
    """
    fs, root = sidecar_fs(path, storage_options)
    try:
        data = fs.cat_file(f"{root}/{ZMETADATA}", start=0)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return sidecar_layout(decode_zmetadata(data))


#: Enough leading bytes to tell a sidecar (JSON text) from the files mistaken for one.
_HEAD = b"\x89HDF\r\n\x1a\n"
_NETCDF3 = (b"CDF\x01", b"CDF\x02", b"CDF\x05")


def _refuse_non_sidecar(fs: Any, root: str, path: Any, head: bytes) -> None:
    """Raise a message that says what ``root`` is when it is clearly not a sidecar."""
    if head.startswith(_HEAD):
        raise InvalidReferenceError(
            f"{path} is an HDF5/netCDF-4 file, not a sidecar: index it first "
            f"(h5sidecar index {path} -o DEST) and pass the sidecar it writes"
        )
    if head.startswith(_NETCDF3):
        raise InvalidReferenceError(
            f"{path} is a netCDF-3 (classic) file, not a sidecar; h5sidecar indexes HDF5 and "
            "netCDF-4 files only (kerchunk's NetCDF3ToZarr reads netCDF-3)"
        )
    if head.startswith(b"PAR1"):
        parent = root.rsplit("/", 1)[0]
        while "/" in parent.strip("/"):
            if fs.exists(f"{parent}/{ZMETADATA}"):
                raise InvalidReferenceError(
                    f"{path} is one record file of the Parquet sidecar {parent}: pass the "
                    f"sidecar (the folder holding {ZMETADATA}) instead"
                )
            parent = parent.rsplit("/", 1)[0]
        raise InvalidReferenceError(
            f"{path} is a Parquet file but not a sidecar (a Parquet sidecar is a folder "
            f"holding {ZMETADATA}); pass that folder"
        )


#: NUL and other control characters never appear in a real object key or path.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _checked(refs: GranuleRefs) -> GranuleRefs:
    """Refuse source URLs no store holds (control characters: a corrupt or planted sidecar).

    Manifests not loaded yet (lazy Parquet) are checked by the fetcher when they are read.
    """
    urls = [refs.source.url]
    for arr in refs.arrays.values():
        if getattr(arr, "manifest_loaded", True):
            urls.extend(arr.manifest.urls)
    for url in dict.fromkeys(urls):
        if _CONTROL.search(url):
            raise InvalidReferenceError(
                f"source URL {url!r} of the sidecar contains a NUL or control character; the "
                "sidecar is corrupt: re-index the granule"
            )
    return refs
