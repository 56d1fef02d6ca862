"""Explicit, frozen settings for each deployable part.

Each settings class is a frozen dataclass with documented defaults.  ``Settings.from_env()`` reads
overrides from environment variables named ``H5SIDECAR_<FIELD>`` (upper case), e.g.
``H5SIDECAR_MAX_CONCURRENCY=64``.  Nothing reads the environment at import time; settings objects
are built by the caller (CLI, gateway factory, user code) and passed down explicitly.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

__all__ = ["GatewaySettings", "IndexSettings", "ReadSettings", "RecordSettings", "from_env"]

ENV_PREFIX = "H5SIDECAR_"

T = TypeVar("T")


def _convert(raw: str, typ: Any) -> Any:
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin is typing.Union or (origin is not None and type(None) in args):
        inner = [a for a in args if a is not type(None)]
        if raw.strip().lower() in {"", "none", "null"}:
            return None
        return _convert(raw, inner[0])
    if origin is Literal:
        if raw not in args:
            raise ValueError(f"expected one of {args}, got {raw!r}")
        return raw
    if origin is tuple:
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    if typ is bool:
        if raw.strip().lower() in {"1", "true", "yes", "on"}:
            return True
        if raw.strip().lower() in {"0", "false", "no", "off"}:
            return False
        raise ValueError(f"expected a boolean, got {raw!r}")
    if typ is int:
        return int(raw)
    if typ is float:
        return float(raw)
    return raw


def from_env(
    cls: type[T], env: Mapping[str, str] | None = None, prefix: str = ENV_PREFIX, **overrides: Any
) -> T:
    """Build ``cls`` from its defaults, then ``H5SIDECAR_*`` variables, then ``overrides``.

    Parameters
    ----------
    cls : dataclass type
        One of the settings classes.
    env : mapping, optional
        The environment to read (default ``os.environ``).
    prefix : str
        Variable prefix, ``"H5SIDECAR_"`` by default.
    **overrides
        Explicit values (e.g. from CLI flags); ``None`` values are ignored.
    """
    env = os.environ if env is None else env
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        name = prefix + f.name.upper()
        if name in env:
            try:
                values[f.name] = _convert(env[name], hints[f.name])
            except ValueError as exc:
                raise ValueError(f"environment variable {name}: {exc}") from exc
    values.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**values)


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """Options of the indexer (one granule -> GranuleRefs).

    Attributes
    ----------
    on_unsupported : "skip" or "raise"
        What to do with a variable that cannot be represented: record it as skipped with its
        reason (default), or raise :class:`~h5sidecar.errors.UnsupportedFeatureError`.
    inline_threshold : int
        Chunks (and compact datasets) of at most this many encoded bytes are stored inside the
        sidecar instead of as byte ranges (saves a request per tiny chunk).  0 disables.
    contiguous_chunk_bytes : int
        Large contiguous datasets are split into virtual chunks of about this many bytes along
        their first dimension so they can be read in parallel.
    materialize_limit : int
        Variables that HDF5 can decode but Zarr cannot address by byte range (variable-length
        strings, object references, chunks with a filter skipped) are decoded and stored in the
        sidecar when their decoded size is at most this many bytes; larger ones are skipped.
    checksums : bool
        Record a content hash of every chunk (reads all the data).
    metadata_block_size : int
        Block size of the read-ahead cache used while scanning metadata over the network.
    max_granule_seconds : float
        Wall-clock limit of one granule (opening, reading, indexing); past it the granule fails
        with kind ``timeout``, and a worker process that does not stop is ended.  0: no limit.
        300 s is ~50x the slowest index time measured (935-variable granules of 2.6-288 MB,
        1.3-6.4 s on a loaded 2-core machine): time grows with variables and chunks, hardly
        with bytes.
    max_hdf5_reads : int
        Read calls HDF5 may make on one granule (about 4,300 for a 935-variable granule); past
        it the granule fails with kind ``limit_exceeded`` (metadata that loops).  0: no limit.
    max_hdf5_read_bytes : int
        Bytes HDF5 may read from one granule, repeats included (also ``limit_exceeded``).
    max_worker_memory : int
        Memory (data segment and anonymous mappings, ``RLIMIT_DATA``) of each worker process
        of a batch; an allocation past it fails inside that worker (HDF5 skips the variable, or
        the granule fails with kind ``memory``).  Linux; 0: no limit.
    source_first_request : int
        Bytes of the first GET of a granule on an object store (its head, and its identity).
    source_whole_object_bytes : int
        An HDF5 object on a store of at most this many bytes is fetched whole right after its
        first GET (in concurrent parts of at most ``metadata_block_size``), and indexed from
        memory: one more round trip instead of one per level of its metadata tree, for at most
        this many bytes more.  Capped by half of ``source_cache_bytes``; 0: never.
    source_cache_bytes : int
        Bytes of the page cache a granule on an object store is read through (least recently
        used blocks go first); metadata is prefetched into at most half of it.
    source_concurrency : int
        Requests in flight at once per granule (prefetch, and chunk ranges read together).
    source_readahead : int
        Bytes read past a read that was not prefetched (HDF5 tends to read on from there).
    source_max_gap : int
        Ranges (pages) of one granule at most this many bytes apart share a request; one request
        spans at most ``metadata_block_size`` bytes (or this gap, if larger).
    source_retries : int
        Attempts after the first for throttling, 5xx, resets and short reads of a granule
        (exponential backoff with full jitter, as on the read path).
    source_backoff : float
        Base delay in seconds of that backoff.
    source_request_timeout : float
        Seconds one request of a granule may take, answer and body (default 30); a request
        past it is a transient failure, retried as above.  A stalled server costs retries,
        never the granule's whole ``max_granule_seconds``.
    max_crawl_steps : int
        Metadata structures parsed ahead of HDF5 per granule at most; past it HDF5's own reads
        are fetched on demand (a bound for corrupt files whose structures loop).
    layout : "kerchunk" or "compact"
        Layout of Parquet sidecars written by batch indexing: ``"kerchunk"`` (record files per
        variable, readable by plain fsspec/kerchunk; default) or ``"compact"`` (``.zmetadata``
        and one manifests file: 2-3 objects per granule, h5sidecar readers only).
    """

    on_unsupported: Literal["skip", "raise"] = "skip"
    inline_threshold: int = 0
    contiguous_chunk_bytes: int = 4 * 2**20
    materialize_limit: int = 64 * 2**20
    checksums: bool = False
    metadata_block_size: int = 4 * 2**20
    max_granule_seconds: float = 300.0
    max_hdf5_reads: int = 5_000_000
    max_hdf5_read_bytes: int = 64 * 2**30
    max_worker_memory: int = 4 * 2**30
    source_first_request: int = 256 * 2**10
    source_whole_object_bytes: int = 16 * 2**20
    source_cache_bytes: int = 256 * 2**20
    source_concurrency: int = 16
    source_readahead: int = 64 * 2**10
    source_max_gap: int = 64 * 2**10
    source_retries: int = 4
    source_backoff: float = 0.1
    source_request_timeout: float = 30.0
    max_crawl_steps: int = 200_000
    layout: Literal["kerchunk", "compact"] = "kerchunk"


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """Options of the read path (fetch executor, store, filesystem, xarray backend).

    Attributes
    ----------
    max_gap : int
        Byte ranges closer than this in one object are merged into a single request.
    max_request : int
        Merged requests stop growing at this size; single ranges larger than it are split into
        parallel parts.
    max_concurrency : int
        Requests in flight at once per filesystem/store (requests larger than 64 KiB).
    max_small_concurrency : int
        Requests of at most 64 KiB in flight at once per filesystem/store, beside the large
        ones.  Small requests (sub-chunk runs, tiny chunks, coordinates) are bound by latency,
        not bandwidth, so they get a wider lane: 200 runs of a thin selection take two rounds
        of requests instead of seven.
    retries : int
        Attempts after the first for throttling (503/SlowDown), 5xx, resets and short reads.
    backoff : float
        Base delay in seconds of the exponential backoff (with jitter).
    check_freshness : bool
        Verify each source's size/ETag/mtime against the sidecar before serving its bytes.
    allowed_prefixes : tuple of str
        Source URL prefixes that may be fetched.  Empty means: the sources recorded in the
        sidecars being read.  ``file://`` sources are never fetched outside these prefixes.
    max_range_bytes : int
        A single referenced chunk larger than this is refused as malformed.
    revalidate_seconds : float
        A cached chunk is served only while its source was seen, at most this long ago, to still
        be the object the sidecar describes (any fetch of the source counts; otherwise one
        HEAD/``stat``).  Each opened store/reader checks at least once.  0 checks on every hit.
    request_timeout : float
        Seconds one upstream request (one attempt) may take before it counts as failed (and is
        retried); a source that never answers (a FIFO, a stalled server) cannot hold a reader.
    sidecar_cache_bytes : int
        Process-wide: byte limit of the cache of parsed sidecars shared by every store,
        filesystem and dataset of the process.  0 disables it.
    chunk_cache_bytes : int
        Process-wide: byte limit of the cache of recently read whole chunks shared by every store
        and batch reader of the process.  0 disables it.
    decode_threads : int
        Process-wide: threads of the pool chunks are decoded in; 0 means one per CPU (at least 2).
    subchunk_fraction : float
        A chunk stored without compressor or filters is read as only the byte runs a selection
        needs when those runs (merged across gaps up to ``max_gap``) move at most this fraction
        of the chunk's bytes; otherwise the whole chunk is read.  0 always reads whole chunks.
    prefetch_bytes : int
        Read-ahead of small arrays by the xarray engine's lazy variables: once a second read
        loads a small array (at most 1/8 of this) whole, the other small arrays opened through
        the same reader (its group's first) are read in the same batch, up to this many decoded
        bytes held, and later reads of them need no request (a loop reading larger arrays whole
        brings its group's next ones, up to as much again).  0 turns it off.

    The three process-wide fields are not per store: a store ignores them.  They take effect
    through :func:`h5sidecar.read.configure`, or from ``H5SIDECAR_SIDECAR_CACHE_BYTES``,
    ``H5SIDECAR_CHUNK_CACHE_BYTES`` and ``H5SIDECAR_DECODE_THREADS`` when the process first
    uses the caches or the pool without that call.
    """

    max_gap: int = 256 * 2**10
    max_request: int = 16 * 2**20
    max_concurrency: int = 32
    max_small_concurrency: int = 128
    retries: int = 5
    backoff: float = 0.1
    check_freshness: bool = True
    allowed_prefixes: tuple[str, ...] = ()
    max_range_bytes: int = 512 * 2**20
    revalidate_seconds: float = 5.0
    request_timeout: float = 30.0
    sidecar_cache_bytes: int = 256 * 2**20
    chunk_cache_bytes: int = 64 * 2**20
    decode_threads: int = 0
    subchunk_fraction: float = 0.5
    prefetch_bytes: int = 64 * 2**20


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Options of the HTTP gateway (``h5sidecar serve``).

    Attributes
    ----------
    host, port : str, int
        Where to listen.
    token : str or None
        Bearer token required on every route but ``/healthz`` and ``/readyz`` when set.
    cors_origins : tuple of str
        Origins allowed by CORS (``*`` for any).
    allow : tuple of str
        Extra source prefixes the gateway may fetch (besides the indexed sources).
    cache_bytes : int
        Byte limit of the LRU caches (sidecars, metadata, hot chunks) together.
    max_upstream : int
        Upstream requests in flight at once; beyond ``max_pending`` waiting requests the gateway
        answers 503 with ``Retry-After``.
    max_pending : int
        Requests that may wait for an upstream slot, per granule and gateway-wide; one more is
        answered 503 (``Retry-After: 1``) at once.
    queue_timeout : float
        Seconds a request may wait for its upstream slots (both gates together) before it is
        answered 503 (``Retry-After: 2``); independent of ``request_timeout``, which bounds
        each upstream attempt once a slot is held.
    max_key_length : int
    max_response_bytes : int
    max_per_granule : int
        Upstream reads of one granule in flight at once; up to ``max_pending`` more wait, so one
        slow or blocking source cannot take every upstream slot.
    shutdown_seconds : float
        On SIGTERM/SIGINT, in-flight requests get this long to finish before they are cut.
    max_connections : int
        Connections served at once (slow clients included); more are answered 503 at once.
    rechunk_bytes : int
        Target size of a virtual chunk in the re-chunk view's ``auto`` spec
        (``/zarr3-rechunk/auto/...``).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    cors_origins: tuple[str, ...] = ("*",)
    allow: tuple[str, ...] = ()
    cache_bytes: int = 256 * 2**20
    max_upstream: int = 64
    max_pending: int = 256
    queue_timeout: float = 30.0
    max_key_length: int = 512
    max_response_bytes: int = 256 * 2**20
    max_per_granule: int = 16
    shutdown_seconds: float = 5.0
    max_connections: int = 4096
    rechunk_bytes: int = 64 * 2**10


#: :attr:`RecordSettings.record_cache` for the default folder.
DEFAULT_RECORD_CACHE = "default"


@dataclass(frozen=True, slots=True)
class RecordSettings:
    """Options of the record of an object-store DEST, as every command that reads it uses
    them (``index``, ``report``, ``prune``, ``catalog``, ``serve``).

    Attributes
    ----------
    record_cache : str
        Folder of the record cache (one SQLite file per DEST, keeping the parts already read
        between runs): ``"default"`` is ``$XDG_CACHE_HOME/h5sidecar/records`` (else
        ``~/.cache/h5sidecar/records``); ``""`` turns the cache off (every reader loads a
        temporary copy of every part).  ``H5SIDECAR_RECORD_CACHE``.
    record_cache_max_age_days : float
        Cache files not used for this many days (DESTs no longer read from this machine) are
        removed when a new cache file is made; removing one costs only a full load if that
        DEST is read again.  0: never.  ``H5SIDECAR_RECORD_CACHE_MAX_AGE_DAYS``.
    record_mark_margin_s : float
        A cube appended to from the DEST asks its record for the rows written since the
        cube's mark, less this many seconds: a part named before the mark but stored after it
        (a slow upload, a writer whose clock is behind) is found while within it; the rows in
        the margin cost a HEAD each.  ``H5SIDECAR_RECORD_MARK_MARGIN_S`` (default 3600).
    """

    record_cache: str = DEFAULT_RECORD_CACHE
    record_cache_max_age_days: float = 30.0
    record_mark_margin_s: float = 3600.0

    def cache_folder(self) -> str | None:
        """The cache's folder (None: no cache), ``"default"`` resolved now."""
        if self.record_cache != DEFAULT_RECORD_CACHE:
            return os.path.expanduser(self.record_cache) or None
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "h5sidecar", "records")
