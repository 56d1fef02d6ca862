"""List the granules of a batch (their sidecars: :func:`h5sidecar.dest._locations.sidecar_url`).

A SOURCE is one local file, a local folder (searched recursively), a glob (local or remote) or an
``s3://bucket/prefix`` folder.  Listing captures each object's identity (size + ETag/mtime) in the
same request that finds it, so change detection needs no extra request per granule.

Granule URLs follow the package convention (:func:`h5sidecar.sources.stores._urls.normalize_url`, the
normaliser sidecars and the store resolver use too): local objects are absolute paths without a
scheme, S3 objects ``s3://bucket/key`` (``s3a://`` is spelled ``s3://``).

Only regular files are granules: FIFOs, sockets and devices found in a local folder or glob are
left out (reading them would block or never end) and named to the caller, who reports them.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from fsspec.utils import glob_translate

from h5sidecar.dest import DEFAULT_PATTERNS, filesystem, is_remote
from h5sidecar.errors import SourceNotFoundError
from h5sidecar.references import SourceInfo
from h5sidecar.sources import normalize_url
from h5sidecar.workflows.listing._listed_granule import (
    Granule,  # re-exported: listing's result type
)
from h5sidecar.workflows.listing._listing_walk import (
    Walked,
    local_glob_rows,
    local_rows,
    s3_glob_rows,
    s3_rows,
)
from h5sidecar.workflows.listing._staged_listing import FIELDS, StagedListing, put
from h5sidecar.workflows.listing._url_list import stage_urls

__all__ = [
    "Granule",
    "list_granules",
    "stage_granules",
]

_GLOB_MAGIC = frozenset("*?[")


def list_granules(
    source: str | Iterable[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    patterns: Sequence[str] = DEFAULT_PATTERNS,
    exclude: Iterable[str] = (),
    not_regular: list[str] | None = None,
) -> list[Granule]:
    """List the granules under ``source``, sorted by name.

    Parameters
    ----------
    source : str or iterable of str
        A file, a folder (searched recursively), a glob (``data/*.h5``, ``s3://b/2019/**/*.h5``),
        an ``s3://bucket/prefix`` folder, one ``https://`` URL, or a list of object URLs
        (:mod:`h5sidecar.workflows.listing._url_list`).
    storage_options : mapping, optional
        fsspec/s3fs options for remote sources (standard AWS environment variables are honoured).
    patterns : sequence of str
        File-name patterns kept when listing a folder or prefix (a single file or a glob is taken
        as given).  ``("*",)`` keeps every object.
    exclude : iterable of str
        URLs of folders whose contents are never listed (the destination of the batch).
    not_regular : list, optional
        Receives the URLs of the matching files left out because they are not regular files
        (FIFOs, sockets, devices).

    Returns
    -------
    list of Granule

    Raises
    ------
    SourceNotFoundError
        When ``source`` does not exist or nothing under it matches ``patterns``.
    """
    with stage_granules(source, storage_options=storage_options, patterns=patterns,
                        exclude=exclude, not_regular=not_regular) as staged:
        return list(staged)


def stage_granules(
    source: str | Iterable[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    patterns: Sequence[str] = DEFAULT_PATTERNS,
    exclude: Iterable[str] = (),
    not_regular: list[str] | None = None,
) -> StagedListing:
    """:func:`list_granules`, staged on disk as found (:class:`StagedListing`: iterating it
    yields the granules sorted by name, a batch at a time), so that listing a million granules
    does not hold them; a local folder or glob is walked with ``os.scandir``, one folder at a
    time, an S3 prefix or glob listed a page at a time (:mod:`._listing_walk`).
    Close it when done (a context manager).  Parameters and errors as :func:`list_granules`.
    """
    if not isinstance(source, str) or source.lower().startswith(("https://", "http://")):
        # named one by one: a web URL (HTTP has no listing) or a list of URLs
        return stage_urls([source] if isinstance(source, str) else source, storage_options)
    url = normalize_url(source)
    fs = filesystem(url, storage_options)
    remote = is_remote(url)
    excluded = tuple(_strip(normalize_url(e)).rstrip("/") + "/" for e in exclude)
    walked = Walked(not_regular)
    rows: Iterable[tuple[Any, ...]] | None = None
    entries: Iterable[tuple[str, Mapping[str, Any]]] = ()
    if _GLOB_MAGIC & set(url):
        root = _glob_root(url)
        # what fsspec's glob keeps of what it lists: its own pattern, matched here as the
        # listing goes (a page or a folder at a time) instead of on a list of everything
        match = re.compile(glob_translate(_strip(url))).match
        if remote and "://" in root and _strip(root):
            # the literal head of the glob's first wildcard segment narrows the S3 listing
            rest = _strip(url)[len(_strip(root)) + 1:]
            head = rest.split("/", 1)[0]
            scheme = url.split("://", 1)[0]
            if "/" in rest and "**" not in rest:  # several levels: listed level by level
                rows = s3_glob_rows(fs, _strip(root), scheme, rest.split("/"), match,
                                    lambda gurl, info: _row(gurl, root, info), excluded,
                                    walked)  # fmt: skip
            else:
                rows = s3_rows(fs, _strip(root), scheme, match,
                               lambda gurl, info: _row(gurl, root, info), excluded, walked,
                               start=re.split(r"[*?\[]", head, maxsplit=1)[0],
                               # a glob of one level (``prefix/*.h5``) lists that level only,
                               # as fsspec's does, not every object below it
                               one_level="**" not in rest)
        elif not remote:
            # fsspec's glob lists ``*`` to the pattern's depth, ``**`` to any
            depth = None if "**" in url else url[len(root):].count("/")
            rows = local_glob_rows(root or os.sep, match, depth, excluded, walked)
        else:
            found = fs.glob(_strip(url), detail=True)
            entries = [(p, i) for p, i in found.items() if i.get("type") != "directory"]
    elif fs.exists(_strip(url)) and fs.info(_strip(url)).get("type") == "other":
        raise SourceNotFoundError(
            f"{source!r} is not a regular file (a FIFO, socket or device): only regular files "
            "are indexed"
        )
    elif fs.isfile(_strip(url)):
        info = fs.info(_strip(url))
        root = posixpath.dirname(_strip(url)) if remote else os.path.dirname(url)
        entries = [(info["name"], info)]
    elif fs.isdir(_strip(url)):
        root = url
        if remote:
            top = _strip(url)
            rows = s3_rows(fs, top, url.split("://", 1)[0],
                           lambda p: _matches(posixpath.basename(p), patterns)
                           and not _hidden(p, top),
                           lambda gurl, info: _row(gurl, root, info), excluded, walked)
        else:
            rows = local_rows(url, patterns, excluded, walked)
    else:
        raise SourceNotFoundError(
            f"{source!r} is neither a file, a folder nor a glob that exists: check the path "
            "(and for S3 the bucket, credentials and endpoint: AWS_* variables or --storage-option)"
        )

    def given() -> Iterator[tuple[Any, ...]]:
        """Rows of the entries of a file or glob, filtered as a walk filters."""
        for path, info in entries:
            if any((_strip(path) + "/").startswith(e) for e in excluded):
                walked.in_dest += 1
                continue
            gurl = _full_url(url, path)
            if not _regular(path, info, remote):
                if not_regular is not None:
                    not_regular.append(gurl)
                continue
            yield _row(gurl, root, info)

    staged = StagedListing()
    try:
        staged.add_rows(given() if rows is None else rows)
    except BaseException:
        staged.close()
        raise
    if not len(staged):
        staged.close()
        raise SourceNotFoundError(_nothing_found(source, patterns, walked.in_dest, excluded))
    return staged


def _row(gurl: str, root: str, info: Mapping[str, Any]) -> tuple[Any, ...]:
    """The staged row of the granule ``gurl`` listed with fsspec's ``info``."""
    ident = identity_from_info(gurl, info)
    return (_relative(gurl, root), *(put(getattr(ident, f)) for f in FIELDS))


def _regular(path: str, info: Mapping[str, Any], remote: bool) -> bool:
    """Whether a listed entry is a regular file.  fsspec types local symlinks, FIFOs, sockets
    and devices alike as ``"other"``: a symlink to a regular file is one (a dangling one is
    not)."""
    if info.get("type") in (None, "file"):
        return True
    if remote:
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)  # follows symlinks
    except OSError:
        return False


def _nothing_found(
    source: str, patterns: Sequence[str], in_dest: int, excluded: tuple[str, ...]
) -> str:
    """Why a listing found no granule, and what to do (never a flag the user already gave)."""
    if in_dest:
        return (
            f"every file matching {list(patterns)} under {source!r} lies inside the destination "
            f"({excluded[0].rstrip('/')}), whose contents are never indexed: choose a DEST "
            "outside SOURCE"
        )
    what = f"no granules found under {source!r} matching {list(patterns)}"
    if "*" in patterns:
        return f"{what}: the folder holds no regular files (check the path)"
    return (f"{what}: select other file names with --pattern (e.g. --pattern '*'; from Python, "
            "patterns=('*',))")


def identity_from_info(url: str, info: Mapping[str, Any]) -> SourceInfo:
    """A :class:`SourceInfo` from an fsspec ``info()``/``find(detail=True)`` entry.

    A local file is stat'ed again: fsspec gives its times as float seconds and no device,
    where the identity a sidecar records (and the freshness guard compares) has the exact
    ``mtime_ns``, ``ctime_ns``, inode and device.
    """
    if "ino" in info and not is_remote(url):
        try:
            st = info.get("stat") or os.stat(url)  # a local walk's own stat of it, when made
        except OSError:
            pass  # gone meanwhile: indexing it says so
        else:
            # built here from the listing's absolute path: identity_from_stat's path
            # normalisation was half of a million-granule listing's time
            return SourceInfo(url=url, size=int(st.st_size), etag=None, mtime=float(st.st_mtime),
                              mtime_ns=int(st.st_mtime_ns), inode=int(st.st_ino),
                              ctime_ns=int(st.st_ctime_ns), device=int(st.st_dev))
    etag = info.get("ETag") or info.get("etag") or info.get("e_tag")
    if etag is not None:
        etag = str(etag).strip('"')
    return SourceInfo(url=url, size=int(info["size"]), etag=etag, mtime=_mtime(info))


def _mtime(info: Mapping[str, Any]) -> float | None:
    # local: "mtime" (float seconds); s3fs: "LastModified" (datetime)
    for key in ("mtime", "LastModified", "last_modified", "modified"):
        value = info.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _strip(url: str) -> str:
    """The path fsspec methods take (``bucket/key`` for S3, the path itself locally)."""
    return url.split("://", 1)[1] if is_remote(url) else url


def _full_url(source_url: str, path: str) -> str:
    if is_remote(source_url):
        return source_url.split("://", 1)[0] + "://" + path.split("://", 1)[-1]
    return os.path.abspath(path)


def _glob_root(url: str) -> str:
    """The longest folder of ``url`` before its first glob character."""
    head = url
    while _GLOB_MAGIC & set(head):
        head = head.rsplit("/", 1)[0]
    return head


def _relative(url: str, root: str) -> str:
    rel = url[len(root) :] if url.startswith(root) else url.rsplit("/", 1)[-1]
    return rel.replace(os.sep, "/").lstrip("/")


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _hidden(path: str, root: str) -> bool:
    # dot-files and dot-folders (editor swap files, temporary files of atomic writers)
    rel = path[len(root.rstrip("/")) :].strip("/")
    return any(part.startswith(".") for part in rel.split("/"))
