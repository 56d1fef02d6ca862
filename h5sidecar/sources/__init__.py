"""Bytes from object stores, web servers and files, for the indexer and the readers alike.

Knows nothing of HDF5 or Zarr.  One URL parser, one store per (scheme, bucket, options), the
allow-list of source prefixes, the pure range planner and the fetch executor:

* :func:`parse_url` / :class:`SourceLocation` -- the one URL parser (``s3://``, ``s3a://``,
  ``file://``, plain paths), and :func:`normalize_url`, the one normaliser (``s3a://`` is
  spelled ``s3://``, local paths absolute without a scheme);
* :func:`resolve_store` -- a cached obstore store for a URL;
* :class:`EndpointCredentials` / :class:`RefreshingCredentials` / :class:`S3Credentials` --
  refreshing S3 credential providers (``storage_options={"credential_provider": ...}``);
* :class:`AllowList` -- which source URLs may be fetched at all;
* :func:`plan_reads` / :class:`ReadPlan` -- pure, vectorised coalescing of byte ranges;
* :class:`ChunkFetcher` -- the executor: bounded concurrency, retries, freshness guard;
* :class:`PinnedFetcher`, :class:`PageCache` -- ``If-Match``-pinned ranged GETs of one object
  into a page cache, with demand reads and a prefetch pool (the indexer reads through them);
* :class:`LocalRangedFile` / :class:`RemoteRangedFile` / :class:`RangeReader` -- ranged readers:
  file objects a format library opens, and many ranges of a source and its companion files;
* :mod:`h5sidecar.sources.web._http_client` / :mod:`h5sidecar.credentials._http_auth` -- ``https://`` sources:
  ranged GETs through redirects with bearer-token / ``.netrc`` auth bound to their hosts;
* :func:`retrying` -- the one retry policy (exponential backoff with full jitter);
* :class:`FetchStats` -- request and byte counters.

Names load on first use so ``import h5sidecar.sources`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from h5sidecar._lazy import lazy_exports

_LAZY = {
    "SourceLocation": "h5sidecar.sources.stores._urls",
    "normalize_url": "h5sidecar.sources.stores._urls",
    "parse_url": "h5sidecar.sources.stores._urls",
    "resolve_store": "h5sidecar.sources.stores._store_cache",
    "EndpointCredentials": "h5sidecar.credentials",
    "RefreshingCredentials": "h5sidecar.credentials",
    "S3Credentials": "h5sidecar.credentials",
    "source_identity": "h5sidecar.sources._source_identity",
    "identity_from_stat": "h5sidecar.sources._source_identity",
    "AllowList": "h5sidecar.sources._allow",
    "ReadPlan": "h5sidecar.sources.fetch._plan",
    "plan_reads": "h5sidecar.sources.fetch._plan",
    "ChunkFetcher": "h5sidecar.sources.fetch._chunk_fetcher",
    "FetchStats": "h5sidecar.sources._stats",
    "PinnedFetcher": "h5sidecar.sources.fetch._pinned",
    "PageCache": "h5sidecar.sources.fetch._pages",
    "LocalRangedFile": "h5sidecar.sources.fetch._ranged",
    "RemoteRangedFile": "h5sidecar.sources.fetch._ranged",
    "RangeReader": "h5sidecar.sources.fetch._ranged",
    "retrying": "h5sidecar.sources.fetch._retry",
    # for h5sidecar's own layers (served by the front, not advertised in __all__):
    "NO_RETRY": "h5sidecar.sources.stores._backends",
    "PAGE": "h5sidecar.sources.fetch._pages",
    "RangedFile": "h5sidecar.sources.fetch._ranged",
    "_gather_or_cancel": "h5sidecar.sources.fetch._chunk_fetcher",
    "_resolve_s3_options": "h5sidecar.sources.stores._store_cache",
    "drop_queued_reads": "h5sidecar.sources.stores._backends",
    "sync_within": "h5sidecar.sources.fetch._ranged",
    "read_object": "h5sidecar.sources.fetch._whole_object",
    "read_ranges": "h5sidecar.sources.fetch._whole_object",
}

__all__ = [
    "AllowList",
    "ChunkFetcher",
    "EndpointCredentials",
    "FetchStats",
    "ReadPlan",
    "RefreshingCredentials",
    "S3Credentials",
    "SourceLocation",
    "identity_from_stat",
    "normalize_url",
    "parse_url",
    "plan_reads",
    "resolve_store",
    "source_identity",
]


if TYPE_CHECKING:  # the names as type checkers see them; at run time each loads on first use
    from h5sidecar.credentials import EndpointCredentials as EndpointCredentials
    from h5sidecar.credentials import RefreshingCredentials as RefreshingCredentials
    from h5sidecar.credentials import S3Credentials as S3Credentials
    from h5sidecar.sources._allow import AllowList as AllowList
    from h5sidecar.sources._source_identity import identity_from_stat as identity_from_stat
    from h5sidecar.sources._source_identity import source_identity as source_identity
    from h5sidecar.sources._stats import FetchStats as FetchStats
    from h5sidecar.sources.fetch._chunk_fetcher import ChunkFetcher as ChunkFetcher
    from h5sidecar.sources.fetch._chunk_fetcher import _gather_or_cancel as _gather_or_cancel
    from h5sidecar.sources.fetch._pages import PAGE as PAGE
    from h5sidecar.sources.fetch._pages import PageCache as PageCache
    from h5sidecar.sources.fetch._pinned import PinnedFetcher as PinnedFetcher
    from h5sidecar.sources.fetch._plan import ReadPlan as ReadPlan
    from h5sidecar.sources.fetch._plan import plan_reads as plan_reads
    from h5sidecar.sources.fetch._ranged import LocalRangedFile as LocalRangedFile
    from h5sidecar.sources.fetch._ranged import RangedFile as RangedFile
    from h5sidecar.sources.fetch._ranged import RangeReader as RangeReader
    from h5sidecar.sources.fetch._ranged import RemoteRangedFile as RemoteRangedFile
    from h5sidecar.sources.fetch._ranged import sync_within as sync_within
    from h5sidecar.sources.fetch._retry import retrying as retrying
    from h5sidecar.sources.fetch._whole_object import read_object as read_object
    from h5sidecar.sources.fetch._whole_object import read_ranges as read_ranges
    from h5sidecar.sources.stores._backends import NO_RETRY as NO_RETRY
    from h5sidecar.sources.stores._backends import drop_queued_reads as drop_queued_reads
    from h5sidecar.sources.stores._store_cache import _resolve_s3_options as _resolve_s3_options
    from h5sidecar.sources.stores._store_cache import resolve_store as resolve_store
    from h5sidecar.sources.stores._urls import SourceLocation as SourceLocation
    from h5sidecar.sources.stores._urls import normalize_url as normalize_url
    from h5sidecar.sources.stores._urls import parse_url as parse_url


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
