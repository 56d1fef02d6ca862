"""Walk a local folder or an S3 prefix into staged listing rows, a page at a time.

:func:`~._listing.stage_granules` writes what these yield straight into its staging database:
rows ``(name, *FIELDS)`` (see :mod:`._staged_listing`), not :class:`Granule` objects, because a
million of them were a third of a no-op re-run's time.  Neither walk holds more than one
folder's entries (local) or one page of keys (S3, ``ListObjectsV2``: 1,000 keys a page) at
once, whatever the number of objects.

Filtering follows the folder listing's rules: file names matching the patterns, dot-files and
dot-folders left out, entries inside an excluded folder (the batch's DEST) counted and left
out, local entries that are not regular files named to the caller.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import fsspec
from fsspec.utils import glob_translate

from h5sidecar._compat.fsspec import run_sync
from h5sidecar._compat.s3fs import list_objects_pages
from h5sidecar.workflows.listing._staged_listing import put

__all__ = ["Walked", "local_glob_rows", "local_rows", "name_filter", "s3_glob_rows", "s3_rows"]

#: What makes a path segment a glob.
_MAGIC = frozenset("*?[")


def name_filter(patterns: Sequence[str]) -> Callable[[str], Any]:
    """A test of file names against fnmatch ``patterns`` (case-sensitive, as
    ``fnmatch.fnmatchcase``), compiled once instead of once per name and pattern."""
    return re.compile("|".join(fnmatch.translate(p) for p in patterns)).match


class Walked:
    """What a walk left out: how many matching entries lay inside an excluded folder
    (``in_dest``) and the URLs of those that are not regular files (``not_regular``)."""

    def __init__(self, not_regular: list[str] | None) -> None:
        self.in_dest = 0
        self.not_regular = not_regular


def local_rows(root: str, patterns: Sequence[str], excluded: tuple[str, ...], walked: Walked
               ) -> Iterator[tuple[Any, ...]]:
    """The staged rows of the regular files under the local folder ``root`` (normalised,
    absolute) whose names match ``patterns``, one folder read at a time with ``os.scandir``
    and one ``stat`` per file (its identity: symlinks followed).

    Dot-folders are not entered and dot-files are left out (as ``_hidden`` in the folder
    listing); unreadable folders and entries gone meanwhile are left out, as fsspec's walk
    leaves them.  ``excluded`` are folder prefixes ending in ``/``.
    """
    match = name_filter(patterns)
    start = len(root.rstrip(os.sep)) + 1
    todo = [root]
    while todo:
        folder = todo.pop()
        inside = any((folder + os.sep).startswith(e) for e in excluded)
        try:
            it = os.scandir(folder)
        except OSError:
            continue
        with it:
            for entry in it:
                name = entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if not name.startswith("."):
                            todo.append(entry.path)
                        continue
                    regular = entry.is_file(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone meanwhile
                if name.startswith(".") or not match(name):
                    continue
                path = entry.path
                if inside or path + os.sep in excluded:
                    walked.in_dest += 1
                    continue
                if (row := _file_row(entry, regular, start, walked)) is not None:
                    yield row


def local_glob_rows(root: str, keep: Callable[[str], Any], depth: int | None,
                    excluded: tuple[str, ...], walked: Walked) -> Iterator[tuple[Any, ...]]:
    """The staged rows of the regular files under the local folder ``root`` (a glob's literal
    folder, normalised, absolute) whose absolute path ``keep`` accepts, at most ``depth``
    folders down (None: any), one folder read at a time.

    What fsspec's ``glob`` lists, entry for entry: dot-files and dot-folders included (its
    patterns match them), symlinks not entered (its walk types them ``"other"``), so that a
    matching symlink to a folder, a FIFO or a dangling symlink is named as not regular.
    """
    start = len(root.rstrip(os.sep)) + 1
    todo = [(root, 1)]
    while todo:
        folder, level = todo.pop()
        try:
            it = os.scandir(folder)
        except OSError:
            continue  # unreadable or gone: fsspec's walk omits it too
        with it:
            for entry in it:
                path = entry.path
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if depth is None or level < depth:
                            todo.append((path, level + 1))
                        continue
                    regular = entry.is_file(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone meanwhile
                if not keep(path):
                    continue
                if any((path + os.sep).startswith(e) for e in excluded):
                    walked.in_dest += 1
                    continue
                if (row := _file_row(entry, regular, start, walked)) is not None:
                    yield row


def _file_row(entry: os.DirEntry[str], regular: bool, start: int, walked: Walked
              ) -> tuple[Any, ...] | None:
    """The staged row of a listed file (named from its path's ``start``), None when it is
    gone meanwhile or not a regular file (then named in ``walked``)."""
    try:
        st = entry.stat()  # follows a symlink: the identity of what it names
    except OSError:
        if regular:
            return None  # gone meanwhile
        st = None  # a dangling symlink: not a regular file
    path = entry.path
    if st is None or not (regular or stat.S_ISREG(st.st_mode)):
        if walked.not_regular is not None:
            walked.not_regular.append(path)
        return None
    return (path[start:].replace(os.sep, "/"), path, st.st_size, None, float(st.st_mtime),
            st.st_mtime_ns, put(st.st_ino), st.st_ctime_ns, put(st.st_dev))


def s3_rows(fs: fsspec.AbstractFileSystem, prefix: str, scheme: str,
            keep: Callable[[str], Any], row: Callable[[str, dict[str, Any]], tuple[Any, ...]],
            excluded: tuple[str, ...], walked: Walked, start: str = "",
            one_level: bool = False) -> Iterator[tuple[Any, ...]]:
    """The staged rows (``row(url, info)``) of the objects under ``prefix`` (``bucket/key``,
    no scheme) whose path ``keep`` accepts, one ``ListObjectsV2`` page at a time.

    ``excluded`` are ``bucket/key/`` prefixes whose objects are counted and left out;
    ``start``, the first characters of the names under ``prefix`` that can match (a glob's
    literal head), narrows the listing (``keep`` decides what it holds); ``one_level`` lists
    only the objects directly under ``prefix`` (a delimited listing), not those below.
    """
    for info in _iter_objects(fs, prefix, start, one_level):
        path = info["name"]
        if not keep(path):
            continue
        if any((path + "/").startswith(e) for e in excluded):
            walked.in_dest += 1
            continue
        yield row(f"{scheme}://{path}", info)


def s3_glob_rows(fs: fsspec.AbstractFileSystem, root: str, scheme: str, segments: Sequence[str],
                 keep: Callable[[str], Any], row: Callable[[str, dict[str, Any]], tuple[Any, ...]],
                 excluded: tuple[str, ...], walked: Walked) -> Iterator[tuple[Any, ...]]:
    """:func:`s3_rows` of a glob of several levels without ``**`` (``root/a*/c/*.h5``: the
    ``segments`` after ``root``), listed level by level: each folder segment with a wildcard is
    a delimited listing of the folders that matched so far (their sub-folders only), a literal
    one costs no request, and the last segment lists the objects of each matching folder.

    Listing everything under ``root`` instead would read every key of folders the glob
    leaves out (all years, to find one day of each).  ``keep`` (the whole glob) decides.
    """
    *folders, last = segments
    for prefix in _glob_folders(fs, root, folders):
        yield from s3_rows(fs, prefix, scheme, keep, row, excluded, walked,
                           start=_literal_head(last), one_level=True)  # fmt: skip


def _literal_head(segment: str) -> str:
    return re.split(r"[*?\[]", segment, maxsplit=1)[0]


def _glob_folders(fs: fsspec.AbstractFileSystem, prefix: str, segments: Sequence[str]
                  ) -> Iterator[str]:  # fmt: skip
    """The folders (``bucket/key``) under ``prefix`` that match the folder ``segments`` in
    turn, depth first (one delimited listing open per level)."""
    if not segments:
        yield prefix
        return
    seg, rest = segments[0], segments[1:]
    if not _MAGIC & set(seg):
        yield from _glob_folders(fs, f"{prefix}/{seg}", rest)
        return
    # the segment's part of the glob's own pattern (fsspec's translation, segment by segment)
    match = re.compile(glob_translate(seg)).match
    for folder in _iter_folders(fs, prefix, _literal_head(seg)):
        if match(folder.rsplit("/", 1)[-1]):
            yield from _glob_folders(fs, folder, rest)


def _iter_folders(fs: fsspec.AbstractFileSystem, prefix: str, start: str) -> Iterator[str]:
    """The sub-folders (common prefixes, ``bucket/key`` without the ``/``) directly under
    ``prefix`` whose names start with ``start``: one delimited listing, a page at a time."""
    bucket, _, key = prefix.partition("/")
    key = key.rstrip("/")
    listed = list_objects_pages(fs, bucket, delimiter="/",
                                prefix=(key + "/" if key else "") + start)  # fmt: skip
    if listed is None:  # another filesystem: its own listing of the folder, whole
        try:
            infos = fs.ls(prefix, detail=True)
        except FileNotFoundError:  # no such folder: nothing matches below it
            return
        for info in infos:
            name = info["name"].rstrip("/")
            if info.get("type") == "directory" and name.rsplit("/", 1)[-1].startswith(start):
                yield name
        return
    for info in _in_pages(fs, listed, folders=True):
        yield info["name"].rstrip("/")


#: Objects taken from the listing's asynchronous iterator per call into fsspec's loop.
_PAGE = 1_000


def _iter_objects(fs: fsspec.AbstractFileSystem, prefix: str, start: str = "",
                  one_level: bool = False) -> Iterator[dict[str, Any]]:
    """The info dictionaries of every object under ``prefix`` (what s3fs's ``find(...,
    detail=True)`` gives each) whose name there starts with ``start`` (or more, in the
    fallback), taken from the listing a page at a time instead of one list of them all.

    s3fs pages through ``ListObjectsV2`` in a private asynchronous generator (its public
    ``find`` collects every page into a list first): see
    :func:`h5sidecar._compat.s3fs.list_objects_pages`.  Where there is none (another
    filesystem, an s3fs outside the checked versions), ``find`` is the fallback, whole.
    """
    bucket, _, key = prefix.partition("/")
    key = key.rstrip("/")
    objects = list_objects_pages(fs, bucket, delimiter="/" if one_level else "",
                                 prefix=(key + "/" if key else "") + start)
    if objects is None:
        yield from fs.find(prefix, detail=True, maxdepth=1 if one_level else None).values()
        return
    yield from _in_pages(fs, objects, folders=False)


def _in_pages(fs: fsspec.AbstractFileSystem, objects: Any, *, folders: bool
              ) -> Iterator[dict[str, Any]]:
    """The folders (``folders``) or the objects of an asynchronous listing, taken from it
    :data:`_PAGE` at a time on fsspec's loop; the listing is closed however the caller stops."""

    async def take() -> list[dict[str, Any]]:
        page: list[dict[str, Any]] = []
        async for info in objects:
            if (info.get("type") == "directory") == folders:
                page.append(info)
            if len(page) >= _PAGE:
                break
        return page

    try:
        while page := run_sync(take, loop=fs.loop):
            yield from page
    finally:
        run_sync(objects.aclose, loop=fs.loop)
