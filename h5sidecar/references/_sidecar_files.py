"""A sidecar's files on fsspec: the filesystem of a URL, many files fetched at once, and a
Parquet sidecar's directory written to an object store.

The object-store writer deletes the old ``.zmetadata`` first, uploads the record files, then
writes ``.zmetadata`` -- the commit marker -- last, and deletes what the new version does not
use: a reader sees "no sidecar" during the write, never new records under old metadata.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from typing import Any

import fsspec

from h5sidecar.credentials import fsspec_options, scrub_credentials
from h5sidecar.references._atomic_local import OURS
from h5sidecar.references.parquet_sidecar._kerchunk_parquet import ZMETADATA

__all__ = ["SidecarFiles", "fetch_files", "sidecar_fs", "write_remote_dir"]


class SidecarFiles:
    """Fetches files of a Parquet sidecar by relative path; picklable without credentials.

    A lazily opened sidecar keeps one of these to load record files later, possibly in a Dask
    worker: it pickles as the sidecar's URL and its storage options minus secrets (workers take
    credentials from their own environment, as the gateway's stores do).
    """

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None,
        *,
        fs: Any = None,
        root: str | None = None,
    ) -> None:
        self.url = url
        self.storage_options = dict(storage_options or {})
        if fs is None or root is None:
            fs, root = sidecar_fs(url, self.storage_options)
        self._fs, self._root = fs, root

    def __call__(self, rels: list[str]) -> dict[str, bytes | None]:
        """``{rel: bytes or None}`` for the files ``rels`` (fetched concurrently)."""
        return fetch_files(self._fs, self._root, rels)

    def __reduce__(self) -> tuple[Any, ...]:
        return (SidecarFiles, (self.url, scrub_credentials(self.storage_options)))


def sidecar_fs(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None
) -> tuple[Any, str]:
    """``(filesystem, root)`` of ``path``, with the options the readers resolve for it."""
    url = os.fspath(path)
    fs, root = fsspec.core.url_to_fs(url, **fsspec_options(url, storage_options))
    return fs, root.rstrip("/")


def fetch_files(fs: Any, root: str, rels: list[str]) -> dict[str, bytes | None]:
    """Fetch many sidecar files in one call (concurrent on async stores); None if absent.

    ``cat_ranges`` rather than ``cat``: it never expands glob characters, which HDF5 names
    ("[", "*") may contain.
    """
    if not rels:
        return {}
    # start=0 rather than None: s3fs sends a HEAD before each whole-object cat (to decide on
    # a parallel download); a "bytes=0-" range needs one GET only
    got = fs.cat_ranges([f"{root}/{rel}" for rel in rels], 0, None, on_error="return")
    out: dict[str, bytes | None] = {}
    for rel, value in zip(rels, got, strict=True):
        if isinstance(value, FileNotFoundError):
            out[rel] = None
        elif isinstance(value, BaseException):
            raise value
        else:
            out[rel] = value
    return out


def write_remote_dir(fs: Any, root: str, files: Iterable[tuple[str, bytes]],
                     keep: Collection[str] = (), existing: set[str] | None = None) -> None:
    """Replace the Parquet sidecar ``root`` on an object store by ``files`` (see above), its
    files ``keep`` (relative paths: an append's) kept as they are; ``existing``: its objects
    as the caller listed them just before (else listed here)."""
    if existing is None:
        try:
            # find alone (one listing): a new prefix lists as empty, and exists() first would
            # cost a HEAD and a listing more
            existing = set(fs.find(root))
        except FileNotFoundError:
            existing = set()
    foreign = sorted(p for p in existing if not OURS.fullmatch(p[len(root) + 1 :]))
    if foreign:
        raise FileExistsError(
            f"{root} holds objects that are not part of a Parquet sidecar (e.g. {foreign[0]}); "
            "refusing to replace it: choose another destination or remove them"
        )
    commit = f"{root}/{ZMETADATA}"
    if commit in existing:
        fs.rm_file(commit)  # un-commit first: readers now see "no sidecar", not a mixture
    pending = {f"{root}/{rel}": data for rel, data in files}
    marker = pending.pop(commit)
    if pending:
        fs.pipe(pending)  # concurrent PUTs of the record files
    fs.pipe_file(commit, marker)
    kept = {f"{root}/{rel}" for rel in keep}
    for path in sorted(existing - set(pending) - {commit} - kept):
        fs.rm_file(path)  # one by one: rm() would expand glob characters in the names
