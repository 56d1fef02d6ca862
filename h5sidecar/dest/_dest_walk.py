"""The walk of a DEST: its sidecars (and staging temporaries), found and staged for ``prune``.

:func:`walk_sidecars` is the one walk over a DEST's folders (what is a sidecar, what is hidden,
where to descend); who walks lists each folder in its own way, for a reason:

- ``prune`` (:func:`walk_dest`) reads a local folder entry by entry, unordered, without holding
  it (a flat folder of a million sidecars), and also wants the staging temporaries;
- ``h5sidecar catalog`` (:mod:`._sidecar_listing`) wants each folder in name order (its items
  come out in a stable order), names only so that identities are those fsspec's listing gave,
  and no deeper than a few folders.

A DEST of a million sidecars listed as Python objects (fsspec's ``ls(detail=True)`` builds a
dictionary per entry) costs gigabytes; a local DEST is read entry by entry with
``os.scandir`` instead, and the sidecars found are staged in a private temporary SQLite
database (:func:`scratch_db`, which staged listings use too) and read back by name in
batches (:class:`StagedSidecars`).
"""

from __future__ import annotations

import functools
import itertools
import os
import posixpath
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Self, TypeVar

__all__ = ["NAMES_BATCH", "StagedSidecars", "entry_mtime", "scratch_db", "walk_dest", "walk_sidecars"]

T = TypeVar("T")

#: Names read back at once (``prune`` decides them with one record query and one pool of
#: existence checks).
NAMES_BATCH = 2_000


def scratch_db() -> sqlite3.Connection:
    """A private temporary SQLite database on disk (removed when closed), in autocommit mode,
    whose sorts spill to disk: where a listing too large to hold is staged."""
    db = sqlite3.connect("", isolation_level=None)  # "": private, on disk, removed on close
    db.execute("PRAGMA temp_store = FILE")  # the sorter spills to a file, not to RAM
    db.execute("PRAGMA journal_mode = OFF")  # scratch: nothing to recover
    return db


class StagedSidecars:
    """Sidecars of DEST as found (``NAME``, format, path), read back by name; a context
    manager (closing it removes the staging file)."""

    def __init__(self) -> None:
        self._db = scratch_db()
        self._db.execute("CREATE TABLE s (stem TEXT NOT NULL, fmt TEXT, path TEXT)")
        self._db.execute("BEGIN")
        self._n = 0

    def add(self, stem: str, fmt: str, path: str) -> None:
        """Stage the sidecar ``path`` of granule ``stem`` in format ``fmt``."""
        self._db.execute("INSERT INTO s VALUES (?, ?, ?)", (stem, fmt, path))
        self._n += 1

    def __len__(self) -> int:
        return self._n

    def batches(self) -> Iterator[list[tuple[str, dict[str, str]]]]:
        """``(NAME, {format: path})`` sorted by name (formats in the order found), in lists
        of :data:`NAMES_BATCH` names."""
        self._db.execute("COMMIT")
        cur = self._db.execute("SELECT stem, fmt, path FROM s ORDER BY stem, rowid")
        rows = itertools.chain.from_iterable(iter(lambda: cur.fetchmany(NAMES_BATCH), []))
        groups = ((stem, {fmt: path for _, fmt, path in g})
                  for stem, g in itertools.groupby(rows, key=lambda r: r[0]))
        while batch := list(itertools.islice(groups, NAMES_BATCH)):
            yield batch

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._db.close()


def walk_dest(fs: Any, root: str, remote: bool
              ) -> Iterator[tuple[str, Callable[[], float | None] | None]]:
    """Sidecars (``.json`` files, ``.parq`` folders) under ``root`` as ``(path, None)``, and
    staging temporaries as ``(path, mtime)`` (``mtime()``: when it was last written, None when
    unknown or gone); a Parquet sidecar's record files are never listed.  A local folder is
    read entry by entry (``os.scandir``), not as a list."""
    def entries(folder: str) -> Iterator[tuple[str, bool, Callable[[], float | None]]]:
        return _ls(fs, folder) if remote else _scan(folder)

    for path, temporary, mtime in walk_sidecars(entries, root, temporaries=True):
        yield path, mtime if temporary else None


def walk_sidecars(entries: Callable[[str], Iterable[tuple[str, bool, T]]], root: str, *,
                  max_depth: int | None = None, temporaries: bool = False
                  ) -> Iterator[tuple[str, bool, T]]:
    """Sidecars (``.json`` files, ``.parq`` folders) below ``root`` as ``(path, False, what
    entries gave)``, depth first in the order ``entries(folder)`` lists each folder's
    ``(path, is_dir, anything)``; with ``temporaries`` also staging temporaries of atomic writes
    (``.NAME.*.tmp``) as ``(path, True, ...)``.

    Hidden names (``.``, ``_``: the record, the report, temporaries) are skipped and not descended
    into, nor is a Parquet sidecar (its record files are never listed); folders deeper than
    ``max_depth`` below ``root`` are not listed.
    """
    stack = [(iter(entries(root)), 0)]
    while stack:
        listing, depth = stack[-1]
        found = next(listing, None)
        if found is None:
            stack.pop()
            continue
        path, is_dir, info = found
        base = posixpath.basename(path)
        if temporaries and base.startswith(".") and base.endswith(".tmp"):
            yield path, True, info
        elif base.startswith((".", "_")):
            continue
        elif (base.endswith(".parq") and is_dir) or (base.endswith(".json") and not is_dir):
            yield path, False, info
        elif is_dir and (max_depth is None or depth < max_depth):
            stack.append((iter(entries(path)), depth + 1))


def _ls(fs: Any, folder: str) -> Iterator[tuple[str, bool, Callable[[], float | None]]]:
    for entry in fs.ls(folder, detail=True):
        yield (entry["name"].rstrip("/"), entry["type"] == "directory",
               functools.partial(entry_mtime, entry))


def _scan(folder: str) -> Iterator[tuple[str, bool, Callable[[], float | None]]]:
    # as fsspec's local ls: symlinks are not followed, entries gone meanwhile are left out
    with os.scandir(folder) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield entry.path, is_dir, functools.partial(_stat_mtime, entry)


def _stat_mtime(entry: os.DirEntry[str]) -> float | None:
    try:
        return entry.stat(follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return None


def entry_mtime(entry: Mapping[str, Any]) -> float | None:
    """The modification time of an fsspec ``info``/``ls`` entry (local or object store)."""
    for key in ("mtime", "LastModified", "last_modified"):
        value = entry.get(key)
        if value is None:
            continue
        return float(value.timestamp()) if hasattr(value, "timestamp") else float(value)
    return None
