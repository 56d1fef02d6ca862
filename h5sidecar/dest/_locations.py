"""Where things are in a DEST and how to reach them: URLs, filesystems, sidecar names and stamps.

The record, the lock and the walk of DEST use these as much as the runs that list and index
granules into it, so they live with the DEST, below every package that reads or writes one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import fsspec
from fsspec.core import url_to_fs

from h5sidecar.credentials import fsspec_options
from h5sidecar.sources import normalize_url

__all__ = [
    "DEFAULT_PATTERNS",
    "RECORD_NAME",
    "REPORT_NAME",
    "SIDECAR_SUFFIX",
    "create_local_dest",
    "filesystem",
    "is_remote",
    "join_url",
    "sidecar_stamp",
    "sidecar_url",
]

#: The record of a local DEST (an SQLite database, :mod:`._record_db`).
RECORD_NAME = "_h5sidecar.sqlite"
#: The run report of DEST as one JSON document: written by earlier versions, read and migrated.
REPORT_NAME = "_report.json"

#: File-name patterns a folder or prefix listing keeps by default (HDF5 and netCDF-4 suffixes).
DEFAULT_PATTERNS: tuple[str, ...] = ("*.h5", "*.hdf5", "*.he5", "*.nc", "*.nc4")

#: Sidecar suffix for each persisted format.
SIDECAR_SUFFIX: dict[str, str] = {"parquet": ".parq", "json": ".json", "dmrpp": ".dmrpp"}


def is_remote(url: str) -> bool:
    """True for URLs with a scheme other than ``file``."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    return scheme not in ("", "file", "local")


def filesystem(url: str, storage_options: Mapping[str, Any] | None = None) -> fsspec.AbstractFileSystem:
    """The fsspec filesystem for ``url`` (local paths need no options)."""
    if not is_remote(url):
        return fsspec.filesystem("file")
    fs, _ = url_to_fs(url, **fsspec_options(url, storage_options))
    return fs


def join_url(base: str, name: str) -> str:
    """``base/name`` for local paths and URLs alike."""
    if is_remote(base):
        return base.rstrip("/") + "/" + name
    return os.path.join(base, *name.split("/"))


def sidecar_url(dest: str, name: str, fmt: Literal["parquet", "json"]) -> str:
    """Where the sidecar of granule ``name`` goes under ``dest`` (``DEST/<name>.parq``)."""
    return join_url(normalize_url(dest), name + SIDECAR_SUFFIX[fmt])


def sidecar_stamp(sidecar: str) -> str | None:
    """Size and modification time (ns) of a local sidecar's commit file (a Parquet sidecar's
    ``.zmetadata``, written last; the JSON file), recorded with its row: a sidecar deleted,
    rewritten or damaged since no longer matches.  None when absent or remote."""
    if is_remote(sidecar):
        return None
    commit = os.path.join(sidecar, ".zmetadata") if sidecar.endswith(".parq") else sidecar
    try:
        st = os.stat(commit)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return f"{st.st_size}:{st.st_mtime_ns}"


def create_local_dest(dest: str) -> None:
    """Create the local folder ``dest`` (and its parents), or raise the ``OSError`` of the
    same type saying "cannot create DEST ...": a DEST that cannot be created is bad input, said
    once, not a failure of each granule."""
    try:
        os.makedirs(dest, exist_ok=True)
    except OSError as exc:
        raise type(exc)(f"cannot create DEST {dest}: {exc.strerror or exc}; pass a folder that "
                        "can be created and written to") from exc
