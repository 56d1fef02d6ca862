"""The sidecars under DEST, found by listing it (streamed), with each one's identity.

A sidecar's identity is what changes when it is rewritten: size and modification time (and the
inode, locally) of a JSON sidecar, or of a Parquet sidecar's ``.zmetadata`` (its folder's own
time does not change when the files inside are replaced).  ``h5sidecar catalog`` keys its
bookkeeping by sidecar URL and identity to re-read only what changed.
"""

from __future__ import annotations

import json
import os
import posixpath
import sqlite3
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec.implementations.local import LocalFileSystem

from h5sidecar.credentials import fsspec_options
from h5sidecar.dest._dest_walk import walk_sidecars
from h5sidecar.dest._locations import RECORD_NAME, REPORT_NAME
from h5sidecar.dest._record_parts import list_parts
from h5sidecar.dest._record_store import latest_rows
from h5sidecar.settings import RecordSettings

__all__ = ["GranuleInfo", "iter_sidecars", "list_indexed", "sidecar_size"]

_SUFFIXES = {".parq": "parquet", ".json": "json"}
#: Folder depth below DEST searched for sidecars.
_MAX_DEPTH = 8
#: Entries of a local folder made into Arrow (or back into ``str``) at a time.
_SLICE = 10_000
#: fsspec's entry types, by the code a local listing holds.
_KINDS = ("directory", "file", "other")


@dataclass(frozen=True)
class GranuleInfo:
    """One indexed granule of DEST as the catalog sees it: its sidecar, besides its references.

    Attributes
    ----------
    name : str
        Path of the sidecar relative to DEST without the sidecar suffix (``"ATL03_x.h5"``),
        also the granule's name in the gateway (``/zarr/<name>/``).
    sidecar : str
        URL of the sidecar.
    format : "json" or "parquet"
    sidecar_bytes : int
        Size of the sidecar (all files of a Parquet directory).
    layout : "kerchunk" or "compact"
        Layout of a Parquet sidecar (``"kerchunk"`` for JSON).
    """

    name: str
    sidecar: str
    format: Literal["json", "parquet"]
    sidecar_bytes: int
    layout: Literal["kerchunk", "compact"] = "kerchunk"


def dest_fs(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The filesystem and root path of DEST (or of any URL)."""
    fs, path = fsspec.core.url_to_fs(url, **fsspec_options(url, storage_options))
    return fs, path.rstrip("/")


def sidecar_size(fs: Any, path: str) -> int:
    """Bytes of a sidecar (all files of a Parquet folder)."""
    return int(fs.du(path, total=True)) if fs.isdir(path) else int(fs.size(path))


def _failed_in_record(path: str) -> set[str]:
    """Names of the granules the record at ``path`` marks as failed."""
    db = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=60.0)
    try:
        return {n for (n,) in db.execute("SELECT name FROM granules WHERE status = 'failed'")}
    finally:
        db.close()


def _failed(fs: Any, root: str, remote: bool, settings: RecordSettings | None) -> set[str]:
    """Names of the granules the last run marks as failed (record, else report)."""
    if not remote and os.path.exists(f"{root}/{RECORD_NAME}"):
        return _failed_in_record(f"{root}/{RECORD_NAME}")
    if remote and list_parts(fs, root):  # an object-store record in parts
        rows = latest_rows(fs, root, ["status", "name"], settings)
        if rows is None:
            return set()
        return {n for st, n in zip(rows["status"].to_pylist(), rows["name"].to_pylist(),
                                    strict=True) if st == "failed"}
    report = f"{root}/{REPORT_NAME}"
    if fs.exists(report):
        with fs.open(report, "rb") as f:
            doc = json.load(f)
        return {g.get("name", "") for g in doc.get("granules", []) if g.get("status") == "failed"}
    return set()


def _local_entries(root: str) -> Iterator[tuple[str, str]]:
    """``(name, type)`` of a local folder's entries in name order, typed as fsspec's
    ``ls(detail=True)`` types them (a link is neither file nor folder: ``"other"``), without its
    per-entry ``stat``: a flat folder of 1,000,000 sidecars held ~1 KB an entry as fsspec's
    dictionaries, and ~0.35 KB as a sorted list of ``(name, type)`` tuples.

    The names are held in Arrow string columns (their characters and 4 bytes each), :data:`_SLICE`
    read at a time, and sorted there (by UTF-8 bytes: the order of ``str``); names that are not
    valid UTF-8 (surrogate escapes) are sorted as Python strings.
    """
    chunks: list[pa.Array] = []
    kinds: list[np.ndarray] = []
    names: list[str] = []
    codes: list[int] = []

    def flush() -> None:
        chunks.append(pa.array(names, pa.string()))
        kinds.append(np.array(codes, np.uint8))
        names.clear()
        codes.clear()

    plain = True
    with os.scandir(root) as it:
        for e in it:
            try:
                kind = (0 if e.is_dir(follow_symlinks=False)
                        else 1 if e.is_file(follow_symlinks=False) else 2)  # fmt: skip
            except OSError:  # gone since the folder was read, as fsspec skips it
                continue
            names.append(e.name)
            codes.append(kind)
            if len(names) >= _SLICE and plain:
                try:
                    flush()
                except UnicodeEncodeError:  # not UTF-8: this folder sorted in Python
                    plain = False
    if plain:
        try:
            flush()
        except UnicodeEncodeError:
            plain = False
    if not plain:
        every = [n for c in chunks for n in c.to_pylist()] + names
        types = np.concatenate([*kinds, np.array(codes, np.uint8)])
        for i in sorted(range(len(every)), key=every.__getitem__):
            yield every[i], _KINDS[types[i]]
        return
    column = pa.chunked_array(chunks, pa.string())
    order = pc.sort_indices(column)
    column, types = column.take(order), np.concatenate(kinds)[order.to_numpy()]
    chunks.clear()  # the unsorted columns, freed before the names are made into strings
    kinds.clear()
    del order
    for start in range(0, len(column), _SLICE):
        part = column.slice(start, _SLICE).to_pylist()
        yield from zip(part, [_KINDS[k] for k in types[start:start + len(part)].tolist()],
                       strict=True)


def _entries(fs: Any, root: str) -> Iterator[tuple[str, str, dict[str, Any] | None]]:
    """``(path, type, listing entry or None)`` of a folder's entries in name order."""
    if isinstance(fs, LocalFileSystem):
        for name, kind in _local_entries(root):
            yield f"{root}/{name}", kind, None
        return
    for entry in sorted(fs.ls(root, detail=True), key=lambda e: e["name"]):
        yield entry["name"].rstrip("/"), entry["type"], entry


def _walk(fs: Any, root: str) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """Paths of the sidecars below ``root`` (hidden names skipped) and their listing entries
    (``None`` locally: :func:`_identity` stats the sidecar), one folder at a time, in name
    order (DEST's one walk, :func:`~._dest_walk.walk_sidecars`)."""
    def entries(folder: str) -> Iterator[tuple[str, bool, dict[str, Any] | None]]:
        return ((path, kind == "directory", entry) for path, kind, entry in _entries(fs, folder))

    for path, _temporary, entry in walk_sidecars(entries, root, max_depth=_MAX_DEPTH):
        yield path, entry


def _local_info(path: str) -> dict[str, Any]:
    """The fields of fsspec's local listing entry that :func:`_identity` uses, as that listing
    gives them (the link's own time and inode, its target's size), so identities recorded from
    fsspec's listing still match."""
    out = os.stat(path, follow_symlinks=False)
    size, link = out.st_size, stat.S_ISLNK(out.st_mode)
    if link:
        try:
            size = os.stat(path).st_size
        except OSError:
            size = 0
    kind = "directory" if not link and stat.S_ISDIR(out.st_mode) else "file"
    return {"type": kind, "size": size, "mtime": out.st_mtime, "ino": out.st_ino}


def _identity(fs: Any, path: str, entry: Mapping[str, Any] | None) -> str:
    if entry is None:
        entry = _local_info(path)
    if entry["type"] == "directory":
        try:
            entry = fs.info(f"{path}/.zmetadata")
        except FileNotFoundError:
            return "no-zmetadata"
    # not the change time: it moves when another hard link to the file is made or removed
    keys = ("size", "mtime", "ino", "ETag", "LastModified")
    return json.dumps([str(entry.get(k, "")) for k in keys])


def iter_sidecars(
    dest: str, *, storage_options: Mapping[str, Any] | None = None, identity: bool = True,
    record_settings: RecordSettings | None = None,
) -> Iterator[tuple[GranuleInfo, str]]:
    """The sidecars under DEST (local folder or ``s3://`` prefix) and their identities, streamed.

    Granules the last run marks as failed are left out; ``sidecar_bytes`` is -1 (sizing a
    Parquet sidecar walks its folder: :func:`sidecar_size` when needed); identities are ``""``
    without ``identity``.  ``record_settings``: the record cache an object-store DEST's
    failed granules are read through (default: ``from_env(RecordSettings)``).
    """
    fs, root = dest_fs(dest, storage_options)
    remote = "://" in dest
    prefix = dest.split("://", 1)[0] + "://" if remote else ""
    failed = _failed(fs, root, remote, record_settings)
    for path, entry in _walk(fs, root):
        rel = posixpath.relpath(path, root)
        suffix = posixpath.splitext(rel)[1]
        name = rel[: -len(suffix)]
        if name in failed:
            continue
        url = prefix + path if remote else path
        info = GranuleInfo(name=name, sidecar=url, format=_SUFFIXES[suffix],  # type: ignore[arg-type]
                           sidecar_bytes=-1)  # fmt: skip
        try:
            ident = _identity(fs, path, entry) if identity else ""
        except FileNotFoundError:  # removed since its folder was listed
            continue
        yield info, ident


def list_indexed(
    dest: str, *, storage_options: Mapping[str, Any] | None = None, sizes: bool = True
) -> list[GranuleInfo]:
    """The sidecars under DEST (local folder or ``s3://`` prefix), sorted by granule name.

    Granules the last run report marks as failed are left out; sidecars are found by listing, so
    a DEST written by several runs (or by hand) is covered too.  ``sizes=False`` leaves
    ``sidecar_bytes`` at -1: sizing a Parquet sidecar walks its folder, a third of a 365-granule
    cube build's time for a number the build does not use.
    """
    fs, _ = dest_fs(dest, storage_options)
    out = []
    for g, _ident in iter_sidecars(dest, storage_options=storage_options, identity=False):
        if sizes:
            path = g.sidecar.split("://", 1)[1] if "://" in g.sidecar else g.sidecar
            g = GranuleInfo(g.name, g.sidecar, g.format, sidecar_size(fs, path), g.layout)
        out.append(g)
    return sorted(out, key=lambda g: g.name)
