"""Granules named one by one: a web URL (an HTTP "folder" cannot be listed) or a list of URLs.

``h5sidecar index --url-list urls.txt -o DEST`` (or ``index_many(["https://...", ...], DEST)``)
indexes exactly the URLs given, one per line of the file (blank lines and ``#`` comments
skipped); each may be ``https://``, ``s3://`` or a local path.  Each granule is named after the
last segment of its URL's path (its sidecar is ``DEST/<name>.parq``), so two URLs of one list
may not share a file name.  The identity of each source (size, ETag, Last-Modified) comes from
one small ranged GET (a ``stat`` or HEAD for files and S3), a few at a time.

A list is staged as it is read (:func:`stage_urls`): the file a line at a time
(:class:`UrlList`), every URL checked against those before it in the staging database, then
the identities requested a chunk at a time, so that a list of a million URLs is never held.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote, urlsplit

from h5sidecar.errors import InvalidRequestError, SourceNotFoundError
from h5sidecar.sources import parse_url, source_identity
from h5sidecar.workflows.listing._staged_listing import FIELDS, StagedListing, put

__all__ = ["UrlList", "granules_of_urls", "read_url_list", "stage_urls"]

#: Identity requests in flight at once while listing a URL list.
_LISTING_THREADS = 8

#: URLs whose identities are requested (and staged) at once.
_CHUNK = 1_000


def read_url_list(path: str | os.PathLike[str]) -> list[str]:
    """The URLs of a text file, one per line (blank lines and ``#`` comments skipped), as a
    list (:class:`UrlList` reads them as they are used).

    Raises
    ------
    SourceNotFoundError
        The file does not exist or names no URL.
    """
    return list(UrlList(path))


class UrlList:
    """The URLs of a text file, one per line (blank lines and ``#`` comments skipped), read a
    line at a time each time it is iterated (:func:`read_url_list` without holding them).

    Raises
    ------
    SourceNotFoundError
        The file does not exist (when made) or names no URL (when iterated to its end).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            open(self.path, encoding="utf-8").close()  # a missing file is told at once
        except FileNotFoundError as exc:
            raise SourceNotFoundError(f"URL list {self.path} does not exist") from exc

    def __iter__(self) -> Iterator[str]:
        named = False
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                url = line.strip()
                if url and not url.startswith("#"):
                    named = True
                    yield url
        if not named:
            raise SourceNotFoundError(f"URL list {self.path} names no URL (one per line)")


def _name(url: str) -> str:
    path = urlsplit(url).path if "://" in url else url
    return unquote(posixpath.basename(path.rstrip("/")))


def granules_of_urls(urls: Sequence[str], storage_options: Mapping[str, Any] | None = None) -> list[Any]:
    """One :class:`~h5sidecar.workflows.listing._listed_granule.Granule` per URL, sorted by name.

    Raises
    ------
    InvalidRequestError
        Two URLs share a file name (their sidecars would collide).
    SourceNotFoundError, SourceAuthError, SourceReadError
        A source is missing or cannot be read (the message names it).
    """

    with stage_urls(urls, storage_options) as staged:
        return list(staged)


def stage_urls(urls: Iterable[str], storage_options: Mapping[str, Any] | None = None
               ) -> StagedListing:
    """:func:`granules_of_urls`, staged on disk as the URLs are read (iterating the result
    yields the granules sorted by name, a batch at a time): what holds a million URLs is the
    staging database.  Same errors, checked in the same order: every URL is parsed and its
    name checked against the others' before any identity is requested.
    """
    staged = StagedListing()
    try:
        db = staged.db
        # first occurrence order (rowid), as dict.fromkeys kept it; one row per URL and name
        db.execute("CREATE TABLE u (url TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE)")
        db.execute("BEGIN")
        for url in (parse_url(u).url for u in urls):
            name = _name(url)
            if db.execute("INSERT OR IGNORE INTO u VALUES (?, ?)", (url, name)).rowcount:
                continue
            (other,) = db.execute("SELECT url FROM u WHERE name = ?", (name,)).fetchone()
            if other != url:
                raise InvalidRequestError(
                    f"{other} and {url} share the file name {name!r}, so their sidecars "
                    "would collide: index them into different destinations"
                )
        db.execute("COMMIT")
        last = 0
        with ThreadPoolExecutor(_LISTING_THREADS) as pool:
            while chunk := db.execute("SELECT rowid, url, name FROM u WHERE rowid > ? "
                                      "ORDER BY rowid LIMIT ?", (last, _CHUNK)).fetchall():
                last = chunk[-1][0]
                ids = pool.map(lambda r: source_identity(r[1], storage_options), chunk)
                staged.add_rows((name, *(put(getattr(i, f)) for f in FIELDS))
                                for (_, _, name), i in zip(chunk, ids, strict=True))
        db.execute("DROP TABLE u")
    except BaseException:
        staged.close()
        raise
    return staged
