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

from h5sidecar._lazy import lazy_exports

_LAZY = {
    "SourceLocation": "h5sidecar.sources.stores._urls",
    "normalize_url": "h5sidecar.sources.stores._urls",
    "parse_url": "h5sidecar.sources.stores._urls",
    "resolve_store": "h5sidecar.sources.stores._store_cache",
    "EndpointCredentials": "h5sidecar.credentials._providers",
    "RefreshingCredentials": "h5sidecar.credentials._providers",
    "S3Credentials": "h5sidecar.credentials._providers",
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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
