"""``index_dmrpp``: a granule's references from its DMR++ document, in one read of the document.

The document is read whole; the granule is only asked its identity (one HEAD, or ``stat``) so
the sidecar carries the size and ETag the freshness guard checks on every read, and so no chunk
may lie past its end.  Every data URL the document names goes through the allow-list first:
by default the folder of the document and that of the granule the caller names (a document
cannot point a reader at another bucket or at ``/etc``).
"""

from __future__ import annotations

import dataclasses
import posixpath
import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from h5sidecar.errors import SourceNotFoundError
from h5sidecar.indexer.dmrpp._dmrpp_document import DmrppDocument
from h5sidecar.indexer.dmrpp._dmrpp_granule import DMRPP_KEY, dmrpp_refs
from h5sidecar.indexer.dmrpp._dmrpp_parse import parse_dmrpp
from h5sidecar.indexer.dmrpp._dmrpp_variable import UrlInfo
from h5sidecar.references import GranuleRefs, SourceInfo
from h5sidecar.settings import IndexSettings
from h5sidecar.sources import AllowList, read_object, read_ranges, source_identity

__all__ = ["PLACEHOLDER", "index_dmrpp", "index_dmrpp_document", "resolve_href"]

#: What NASA's documents hold instead of a data URL (filled in by the server serving them).
PLACEHOLDER = "OPeNDAP_DMRpp_DATA_ACCESS_URL"
_SUFFIX = ".dmrpp"


def _has_scheme(href: str) -> bool:
    return "://" in href


def _folder(url: str) -> str:
    return url.rstrip("/").rpartition("/")[0] or "/"


def resolve_href(href: str, doc_href: str, granule_url: str) -> str:
    """The URL a per-chunk ``href`` names.

    The placeholder, an empty ``href`` and the document's own data URL are the granule.  A URL
    with a scheme is taken as written.  Any other path is where build_dmrpp found the file on the
    machine that built the document: it is taken relative to the folder of the document's data
    path, and found at the same place relative to the granule.
    """
    if not href or PLACEHOLDER in href or href == doc_href:
        return granule_url
    if _has_scheme(href):
        return href
    base = "" if (not doc_href or PLACEHOLDER in doc_href or _has_scheme(doc_href)) else doc_href
    if base.startswith("/") and not href.startswith("/"):
        rel = href  # a relative path beside a rooted one: relative to the granule's folder
    else:  # both rooted, so relpath never involves this process's working folder
        rel = posixpath.relpath("/" + href.lstrip("/"), posixpath.dirname("/" + base.lstrip("/")))
    return f"{_folder(granule_url)}/{rel}"


def _granule_url(doc: DmrppDocument, dmrpp_url: str, source_url: str | None) -> str:
    if source_url is not None:
        return source_url
    if _has_scheme(doc.href) and PLACEHOLDER not in doc.href:
        return doc.href
    if not dmrpp_url.endswith(_SUFFIX):
        raise ValueError(
            f"{dmrpp_url} does not end in {_SUFFIX!r} and its data URL is a placeholder or a "
            "path: pass source_url, the granule the document describes"
        )
    return dmrpp_url[: -len(_SUFFIX)]


def index_dmrpp(
    dmrpp_url: str,
    source_url: str | None = None,
    *,
    allowed_prefixes: Iterable[str] = (),
    settings: IndexSettings | None = None,
    byte_order: Literal["LE", "BE"] | None = None,
    **storage_options: Any,
) -> GranuleRefs:
    """Index a granule from its DMR++ document (no HDF5 metadata is read).

    Parameters
    ----------
    dmrpp_url : str
        The document: ``s3://bucket/key.h5.dmrpp``, ``https://...``, a local path.
    source_url : str, optional
        The granule.  Default: the document's data URL when it is a URL, else the document's
        URL without ``.dmrpp``.  The ``OPeNDAP_DMRpp_DATA_ACCESS_URL`` placeholder and paths
        in the document resolve to it (per-chunk ``href`` paths to files beside it).
    allowed_prefixes : iterable of str
        Where data may be.  Default: the folder of the document, and that of ``source_url``
        when given (a data URL the document alone names elsewhere is refused).
    settings : IndexSettings, optional
        ``on_unsupported`` ("skip" records what DMR++ cannot express in
        ``GranuleRefs.skipped``, "raise" raises).
    byte_order : "LE" or "BE", optional
        The byte order of multi-byte variables whose ``dmrpp:chunks`` gives none (documents
        written before 2019).  Default: such variables are skipped, as the order is not known.
    **storage_options
        s3fs-style options for the document and the granule (``endpoint_url``, ``anon``, ...).

    Returns
    -------
    GranuleRefs
        The references the HDF5 indexer would write where the document can say them, with
        ``extra["from_dmrpp"]`` naming the document.

    Raises
    ------
    InvalidDmrppError
        Not XML, a chunk past the end of the granule, a chunk grid that does not cover a shape.
    ForbiddenSourceError
        A data URL outside the allowed prefixes.
    SourceNotFoundError, SourceReadError
        The document or the granule cannot be read.
    UnsupportedFeatureError
        With ``on_unsupported="raise"``, at the first variable DMR++ cannot express.
    """
    started = time.perf_counter()
    data, doc_identity = read_object(dmrpp_url, storage_options)
    return index_dmrpp_document(
        data, doc_identity, source_url, allowed_prefixes=allowed_prefixes, settings=settings,
        byte_order=byte_order, storage_options=storage_options, started=started,
    )  # fmt: skip


def index_dmrpp_document(
    data: bytes,
    doc_identity: SourceInfo,
    source_url: str | None = None,
    *,
    allowed_prefixes: Iterable[str] = (),
    settings: IndexSettings | None = None,
    byte_order: Literal["LE", "BE"] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    started: float | None = None,
    source: SourceInfo | None = None,
) -> GranuleRefs:
    """:func:`index_dmrpp` of a document already read (``data``, read from
    ``doc_identity.url``); the other parameters are :func:`index_dmrpp`'s.  ``source``: the
    granule's identity when the caller looked it up already (at ``source_url``)."""
    started = time.perf_counter() if started is None else started
    settings = settings or IndexSettings()
    storage_options = dict(storage_options or {})
    dmrpp_url = doc_identity.url
    doc = parse_dmrpp(data, url=dmrpp_url)
    granule = _granule_url(doc, dmrpp_url, source_url)
    # the document is untrusted: by default its data may be beside it or where the caller
    # says the granule is, never where the document alone says
    given = (_folder(source_url),) if source_url is not None else ()
    prefixes = tuple(allowed_prefixes) or (_folder(doc_identity.url), *given)
    allow = AllowList(prefixes)
    allow.check(granule)
    if source is None or source_url is None or source.url != allow.check(granule).url:
        source = source_identity(granule, storage_options)
    seen: dict[str, UrlInfo] = {}

    def url_info(href: str) -> UrlInfo:
        if href not in seen:
            url = resolve_href(href, doc.href, source.url)
            if url == source.url:
                seen[href] = UrlInfo(url, source.size)
            else:
                url = allow.check(url).url
                try:
                    seen[href] = UrlInfo(url, source_identity(url, storage_options).size)
                except SourceNotFoundError:
                    seen[href] = UrlInfo(url, None)
        return seen[href]

    from h5sidecar._version import __version__

    provenance = {
        "indexer": f"h5sidecar {__version__}",
        DMRPP_KEY: {"url": doc_identity.url, "href": doc.href, "version": doc.version,
                    "size": doc_identity.size, "etag": doc_identity.etag},
        "settings": {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip

    def read(url: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        return read_ranges(url, ranges, storage_options)

    refs = dmrpp_refs(doc, source, url_info, settings, provenance, byte_order=byte_order,
                      read=read)  # fmt: skip
    return GranuleRefs(refs.source, refs.groups, refs.arrays, refs.skipped,
                       {**refs.extra, "index_seconds": round(time.perf_counter() - started, 3)})  # fmt: skip
