"""Granules named one by one: a web URL (an HTTP "folder" cannot be listed) or a list of URLs.

``h5sidecar index --url-list urls.txt -o DEST`` (or ``index_many(["https://...", ...], DEST)``)
indexes exactly the URLs given, one per line of the file (blank lines and ``#`` comments
skipped); each may be ``https://``, ``s3://`` or a local path.  Each granule is named after the
last segment of its URL's path (its sidecar is ``DEST/<name>.parq``), so two URLs of one list
may not share a file name.  The identity of each source (size, ETag, Last-Modified) comes from
one small ranged GET (a ``stat`` or HEAD for files and S3), a few at a time.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote, urlsplit

from h5sidecar.errors import InvalidRequestError, SourceNotFoundError
from h5sidecar.sources._identity import source_identity
from h5sidecar.sources._urls import parse_url
from h5sidecar.workflows._granule import Granule

__all__ = ["granules_of_urls", "read_url_list"]

#: Identity requests in flight at once while listing a URL list.
_LISTING_THREADS = 8


def read_url_list(path: str | os.PathLike[str]) -> list[str]:
    """The URLs of a text file, one per line (blank lines and ``#`` comments skipped).

    Raises
    ------
    SourceNotFoundError
        The file does not exist or names no URL.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except FileNotFoundError as exc:
        raise SourceNotFoundError(f"URL list {os.fspath(path)} does not exist") from exc
    urls = [line for line in lines if line and not line.startswith("#")]
    if not urls:
        raise SourceNotFoundError(f"URL list {os.fspath(path)} names no URL (one per line)")
    return urls


def _name(url: str) -> str:
    path = urlsplit(url).path if "://" in url else url
    return unquote(posixpath.basename(path.rstrip("/")))


def granules_of_urls(urls: Sequence[str], storage_options: Mapping[str, Any] | None = None) -> list[Any]:
    """One :class:`~h5sidecar.workflows._granule.Granule` per URL, sorted by name.

    Raises
    ------
    InvalidRequestError
        Two URLs share a file name (their sidecars would collide).
    SourceNotFoundError, SourceAuthError, SourceReadError
        A source is missing or cannot be read (the message names it).
    """

    canon = list(dict.fromkeys(parse_url(u).url for u in urls))
    names: dict[str, str] = {}
    for url in canon:
        name = _name(url)
        if name in names:
            raise InvalidRequestError(
                f"{names[name]} and {url} share the file name {name!r}, so their sidecars "
                "would collide: index them into different destinations"
            )
        names[name] = url
    with ThreadPoolExecutor(min(_LISTING_THREADS, len(canon)) or 1) as pool:
        ids = list(pool.map(lambda u: source_identity(u, storage_options), canon))
    granules = [Granule(u, _name(u), i) for u, i in zip(canon, ids, strict=True)]
    return sorted(granules, key=lambda g: g.name)
