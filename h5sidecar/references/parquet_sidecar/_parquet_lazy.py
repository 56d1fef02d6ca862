"""Parquet sidecars opened without reading a manifest: each array's loads on first use.

A Parquet sidecar holds every array's metadata in ``.zmetadata`` and its chunk references in
per-array record files.  Reading the metadata alone is one GET; a
:class:`~h5sidecar.references._lazy_refs.LazyArrayRefs` then stands in for the
:class:`~h5sidecar.references.ArrayRefs` of each array and fetches its record files only
when the manifest is first needed (as fsspec's ``LazyReferenceMapper`` does) -- or, when the
sidecar has the all-arrays manifests file, every array's from that one file (always for a
compact sidecar, which has no record files).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from h5sidecar._memory import give_back
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._assemble import (
    ChunkColumns,
    build_manifest,
    build_metas,
    url_sizes,
)
from h5sidecar.references._assemble import _check_within_source as check_within_source
from h5sidecar.references._assemble import _checksums as array_checksums
from h5sidecar.references._extras import (
    ArrayExtras,
    Extras,
    parse_extras,
    select_extras,
)
from h5sidecar.references._extras_versions import EXTRAS_KEY, PACKED_VERSIONS, unpack
from h5sidecar.references._lazy_refs import LazyArrayRefs
from h5sidecar.references._manifest import ChunkManifest
from h5sidecar.references._model import GranuleRefs
from h5sidecar.references._zmeta import select_nodes, split_metadata
from h5sidecar.references.datacube._member_table import MemberTable
from h5sidecar.references.parquet_sidecar._kerchunk_parquet import (
    CHECKSUMS_FILE,
    bulk_file,
    manifests_parts,
    read_checksums,
    read_table,
    record_columns,
    record_path,
    sidecar_layout,
)
from h5sidecar.references.parquet_sidecar._manifests_file import (
    MANIFESTS_FILE,
    BulkColumns,
    decode_manifests,
)
from h5sidecar.references.parquet_sidecar._manifests_file_small import SmallBulkColumns
from h5sidecar.references.parquet_sidecar._manifests_parts import BulkPart, fetch_parts

__all__ = [
    "BULK_LOAD_BYTES",
    "MANIFEST_CACHE_BYTES",
    "ParquetManifests",
    "read_parquet_lazy",
]


#: Default bound of the manifests one lazily opened sidecar keeps in memory.
MANIFEST_CACHE_BYTES = 256 * 2**20
#: A sidecar's all-arrays manifest file up to this size is read whole on the first manifest
#: needed (one GET instead of one per array); larger ones are read per array.
BULK_LOAD_BYTES = 32 * 2**20

#: A decoded all-arrays manifest file of at least this many chunks gives the memory its decode
#: freed back to the system at once (a cube's; a granule's is far smaller).
RELEASE_ROWS = 100_000
#: An all-arrays manifest file (with its parts) of more chunks than this, a large cube's, is
#: decoded one array at a time as each is first read (only the row groups holding it), not
#: every array's at the first: a cube's open reads its coordinates, a read of one variable
#: decodes that variable's chunk references, whatever the cube's other variables.  (An open
#: of a few named arrays decodes those together, as before.)
PER_ARRAY_ROWS = 1 << 18


class ParquetManifests:
    """Loads the manifests of a Parquet sidecar's arrays on demand; thread-safe, byte-bounded.

    Parameters
    ----------
    fetch : callable
        ``fetch(list of relative paths) -> {path: bytes or None}`` (picklable, so a lazily
        opened sidecar can travel to Dask workers).
    record_size : int
        Chunks per record file.
    metas : mapping
        Array path -> :class:`ArrayMeta` (the grid each manifest must fill).
    extras : Extras
        The sidecar's extras (source identity, per-array URL tables and checksum modes).
    max_bytes : int
        Manifests kept in memory; the least recently used are dropped (and fetched again when
        next needed) beyond this.
    bulk_bytes : int, optional
        Size of the sidecar's all-arrays manifest file
        (:mod:`~h5sidecar.references.parquet_sidecar._manifests_file`), None when it has
        none.  When it is at most :data:`BULK_LOAD_BYTES`, the first manifest needed loads
        every array's from it, in one fetch.
    bulk_only : bool
        The sidecar has no record files (compact layout): the manifests file is read whatever
        its size.
    others : collection of str
        The sidecar's arrays left out of ``metas`` (opened for a few named arrays): the
        manifests file may name them.
    bulk_data : bytes, optional
        The manifests file, already fetched (with ``.zmetadata``, concurrently): used instead
        of fetching it when the first manifest is needed.
    bulk_parts : sequence of BulkPart, optional
        The manifests file's parts (a cube appended to:
        :mod:`~h5sidecar.references.parquet_sidecar._manifests_parts`), fetched together.
    """

    def __init__(
        self,
        fetch: Callable[[list[str]], Mapping[str, bytes | None]],
        record_size: int,
        metas: Mapping[str, ArrayMeta],
        extras: Extras,
        max_bytes: int = MANIFEST_CACHE_BYTES,
        bulk_bytes: int | None = None,
        bulk_only: bool = False,
        others: Collection[str] = (),
        bulk_data: bytes | None = None,
        bulk_parts: Sequence[BulkPart] | None = None,
    ) -> None:
        self._fetch = fetch
        self._record_size = record_size
        self._metas = dict(metas)
        self._extras = extras
        self._max_bytes = max_bytes
        self._bulk_bytes = bulk_bytes
        self._bulk_parts = list(bulk_parts) if bulk_parts is not None else None
        self._bulk_only = bulk_only
        self._others = frozenset(others)
        self._init_state()
        self._bulk_data = bulk_data  # not pickled: a worker fetches the file if it needs it

    _member_urls: Sequence[str] | None

    def _urls(self, path: str) -> Sequence[str] | None:
        """The URL order of ``path``'s manifest (the members', read once, for a cube's)."""
        ax = self._extras.arrays.get(path, ArrayExtras())
        if not ax.from_members:
            return ax.urls
        if self._member_urls is None:
            self._member_urls = self._extras.member_urls()
        return self._member_urls

    def _url_column(self, path: str) -> pa.ChunkedArray | None:
        """``path``'s URL order in Arrow when it is the members' (a cube's), else None."""
        members = self._extras.members
        if self._extras.arrays.get(path, ArrayExtras()).from_members and isinstance(
                members, MemberTable):
            return members.checked_urls()
        return None

    def _init_state(self) -> None:
        self._member_urls = None  # a cube's, read when a manifest first needs them
        self._bulk_wanted = self._bulk_bytes is not None and (
            self._bulk_only or self._bulk_bytes <= BULK_LOAD_BYTES
        )
        self._bulk_lock = threading.Lock()
        self._lock = threading.Lock()
        self._path_locks: dict[str, threading.Lock] = {}
        self._cache: OrderedDict[str, tuple[ChunkManifest, np.ndarray | None, int]] = OrderedDict()
        self._bytes = 0
        self._side: dict[str, np.ndarray] | None = None
        self._bulk: BulkColumns | SmallBulkColumns | None = None
        # a large file's bytes (or its parts'), decoded an array at a time (PER_ARRAY_ROWS)
        self._per_array: bytes | list[tuple[bytes, tuple[str, ...], bool]] | None = None
        # every bulk chunk lies within its known-size source (None: not checked yet)
        self._bulk_within: bool | None = None
        self._bulk_data = None

    def __getstate__(self) -> dict[str, Any]:
        # Locks and loaded manifests stay behind: a worker fetches what it reads.
        keep = ("_fetch", "_record_size", "_metas", "_extras", "_max_bytes", "_bulk_bytes",
                "_bulk_parts",
                "_bulk_only", "_others")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    # -- ManifestLoader ---------------------------------------------------------------------
    def urls(self, path: str) -> Sequence[str]:
        """The URLs of ``path``'s manifest, from the extras (no I/O but, for a cube's array
        whose URLs are its members', the members file once)."""
        return self._urls(path) or ()

    def from_members(self, path: str) -> bool:
        """True when ``path``'s manifest URLs are the cube's members', in order (no I/O)."""
        return self._extras.arrays.get(path, ArrayExtras()).from_members

    def is_loaded(self, path: str) -> bool:
        """True when ``path``'s manifest is cached."""
        return path in self._cache

    def resident_nbytes(self, path: str) -> int:
        """Bytes of ``path``'s cached manifest (0 when not loaded)."""
        hit = self._cache.get(path)
        return 0 if hit is None else hit[2]

    def load(self, path: str) -> tuple[ChunkManifest, np.ndarray | None]:
        """``(manifest, checksums)`` of ``path``: from the cache, else its record files (once).

        Raises
        ------
        InvalidReferenceError
            When the record files are malformed, truncated or inconsistent with the metadata.
        """
        hit = self._cached(path)
        if hit is not None:
            return hit
        if self._bulk_wanted:
            self._load_bulk()
        with self._lock:
            lock = self._path_locks.setdefault(path, threading.Lock())
        with lock:  # concurrent first readers of one array wait for a single load
            hit = self._cached(path)
            if hit is not None:
                return hit
            manifest, checksums = self._read(path)
            self._store(path, manifest, checksums)
            return manifest, checksums

    # -- internals ----------------------------------------------------------------------------
    def _cached(self, path: str) -> tuple[ChunkManifest, np.ndarray | None] | None:
        with self._lock:
            hit = self._cache.get(path)
            if hit is None:
                return None
            self._cache.move_to_end(path)
            return hit[0], hit[1]

    def _store(self, path: str, manifest: ChunkManifest, checksums: np.ndarray | None) -> None:
        size = manifest.nbytes + (0 if checksums is None else checksums.nbytes)
        with self._lock:
            self._cache[path] = (manifest, checksums, size)
            self._bytes += size
            # the newest entry always stays, even alone over budget: its reader needs it now
            while self._bytes > self._max_bytes and len(self._cache) > 1:
                _, (_, _, dropped) = self._cache.popitem(last=False)
                self._bytes -= dropped

    def _load_bulk(self) -> None:
        """Fetch and decode the all-arrays manifest file, once (concurrent callers wait);
        each array's manifest is then built from it when first needed, with no more I/O."""
        with self._bulk_lock:
            if not self._bulk_wanted:
                return
            side_needed = self._side is None and any(
                a.checksums == "file" for a in self._extras.arrays.values()
            )
            parts = self._bulk_parts or [BulkPart(MANIFESTS_FILE, self._bulk_bytes or 0, -1)]
            if self._bulk_data is not None and not side_needed and len(parts) == 1:
                blobs: Mapping[str, bytes | None] = {MANIFESTS_FILE: self._bulk_data}
            else:
                blobs = self._fetch([*(p.file for p in parts),
                                     *([CHECKSUMS_FILE] if side_needed else [])])
            self._bulk_data = None
            data = fetch_parts(parts, blobs)
            payload = data[0][0] if len(parts) == 1 else data
            if not self._others and len(self._metas) > 1 and _rows(payload) > PER_ARRAY_ROWS:
                self._per_array = payload
            else:
                self._bulk = decode_manifests(payload, self._metas, self._others)
                _released(self._bulk)
            if side_needed:
                self._side = read_checksums(blobs.get(CHECKSUMS_FILE))
            self._bulk_wanted = False

    def _check_sizes(self, path: str, manifest: ChunkManifest) -> None:
        """Refuse a chunk of ``manifest`` ending past its source's recorded size, looking up
        the sizes of only the URLs its chunks use (a cube's manifest lists every member)."""
        codes = manifest.codes.reshape(-1)
        used = np.unique(codes[codes >= 0]).tolist()
        urls = [manifest.urls[c] for c in used]
        sizes = url_sizes(pa.array(urls, pa.string()), self._extras).tolist()
        check_within_source(path, manifest, dict(zip(urls, sizes, strict=True)))

    def _within_sources(self) -> bool:
        """Whether every chunk of the all-arrays manifest file ends within its source's recorded
        size, checked at once on the first array with chunks in a source (not before: an
        array of inline chunks, a cube's coordinates, needs no source size, and a cube's sizes
        are in its members file).  A small file's arrays are checked one by one instead, in
        plain Python, which is as cheap."""
        if self._bulk_within is None:
            bulk = self._bulk
            self._bulk_within = isinstance(bulk, BulkColumns) and bulk.within_sources(
                url_sizes(bulk.url_dictionary, self._extras))
        return self._bulk_within

    def _read(self, path: str) -> tuple[ChunkManifest, np.ndarray | None]:
        meta = self._metas[path]
        ax = self._extras.arrays.get(path, ArrayExtras())
        rs = self._record_size
        if self._bulk is not None:  # every array's chunks are in memory already
            manifest = self._bulk.manifest(path, self._urls(path), self._url_column(path))
            if manifest.urls and not self._within_sources():
                self._check_sizes(path, manifest)  # to name the bad array
            return manifest, array_checksums(path, ax, meta.grid_shape, self._side or {})
        if self._per_array is not None:  # this array's rows of a large file, decoded now
            others = (set(self._metas) - {path}) | self._others
            one = decode_manifests(self._per_array, {path: meta}, others)
            manifest = one.manifest(path, self._urls(path), self._url_column(path))
            if manifest.urls and not (isinstance(one, BulkColumns) and one.within_sources(
                    url_sizes(one.url_dictionary, self._extras))):
                self._check_sizes(path, manifest)
            _released(one)
            return manifest, array_checksums(path, ax, meta.grid_shape, self._side or {})
        n = int(np.prod(meta.grid_shape, dtype=np.int64))
        wanted = {record_path(path, r): r for r in range(math.ceil(n / rs))}
        side_needed = ax.checksums == "file" and self._side is None
        blobs = self._fetch([*wanted, *([CHECKSUMS_FILE] if side_needed else [])])
        tables = [
            (r, read_table(rel, blob))
            for rel, r in wanted.items()
            if (blob := blobs.get(rel)) is not None  # an absent record: all its chunks missing
        ]
        cols = record_columns(path, meta, tables, rs) if tables else ChunkColumns()
        manifest = build_manifest(path, meta.grid_shape, cols, self._urls(path))
        if manifest.urls:  # (a cube's sizes are in its members file: read only when needed)
            self._check_sizes(path, manifest)
        if side_needed:
            self._side = read_checksums(blobs.get(CHECKSUMS_FILE))
        return manifest, array_checksums(path, ax, meta.grid_shape, self._side or {})


def read_parquet_lazy(
    zmetadata: Mapping[str, Any],
    fetch: Callable[[list[str]], Mapping[str, bytes | None]],
    *,
    max_bytes: int = MANIFEST_CACHE_BYTES,
    match: Callable[[str], bool] | None = None,
    bulk_data: bytes | None = None,
) -> GranuleRefs | None:
    """:class:`GranuleRefs` of a Parquet sidecar from its ``.zmetadata`` alone (no other I/O).

    Every array is a :class:`LazyArrayRefs` whose record files ``fetch`` reads on first use.
    ``match``: keep only the arrays whose paths it accepts (the others' metadata is never
    built); ``bulk_data``: the all-arrays manifests file when already fetched.
    Returns ``None`` for sidecars without h5sidecar extras (written by kerchunk): their source
    identity is derived from chunk URLs, so they must be read whole
    (:func:`~h5sidecar.references.parquet_sidecar._kerchunk_parquet.read_parquet_parts`), and
    for a ``match`` on sidecars whose extras and metadata do not name the same arrays.
    """
    if EXTRAS_KEY not in zmetadata:
        return None
    nodes = split_metadata(zmetadata["metadata"])
    block = zmetadata[EXTRAS_KEY]
    others: set[str] = set()
    if match is not None:
        chosen = {p for p in nodes.arrays if match(p)}
        if isinstance(block, dict) and block.get("version") in PACKED_VERSIONS:
            # a version-2 block (a cube's) names its arrays once unpacked, as parse_extras
            # would unpack it: else such an open fell back to reading every array now
            block = unpack(block)
        block = select_extras(block, set(nodes.arrays), chosen)
        if block is None:
            return None
        others = nodes.arrays.keys() - chosen
        nodes = select_nodes(nodes, chosen)
    extras = parse_extras(block, fetch)
    metas = build_metas(nodes, extras)
    compact = sidecar_layout(zmetadata) == "compact"
    loader = ParquetManifests(
        fetch,
        0 if compact else int(zmetadata["record_size"]),
        metas,
        extras,
        max_bytes,
        bulk_file(zmetadata),
        bulk_only=compact,
        others=others,
        bulk_data=bulk_data,
        bulk_parts=manifests_parts(zmetadata),
    )
    arrays = {}
    for path, meta in metas.items():
        ax = extras.arrays.get(path)
        arrays[path] = LazyArrayRefs(
            path,
            meta,
            loader,
            status=ax.status if ax is not None else "virtual",
            note=ax.note if ax is not None else "",
            zarray_fill=nodes.arrays[path][0].get("fill_value"),
        )
    return GranuleRefs(
        source=extras.source,
        groups=nodes.groups,
        arrays=arrays,
        skipped=extras.skipped,
        extra=extras.extra,
        members=extras.members,
    )


def _rows(payload: bytes | Sequence[tuple[bytes, Sequence[str], bool]]) -> int:
    """Rows of a manifests file, or of all its parts (their footers read, nothing decoded)."""
    blobs = [payload] if isinstance(payload, bytes) else [d for d, *_ in payload]
    try:
        return sum(pq.ParquetFile(pa.BufferReader(b)).metadata.num_rows for b in blobs)
    except (pa.ArrowException, OSError):
        return 0  # decoded whole, which names what is wrong with it


def _released(cols: BulkColumns | SmallBulkColumns) -> None:
    """Give back what a large decode freed: it passed through several copies of the columns,
    which Arrow's allocator keeps unless asked (~340 MB of a million-member cube's)."""
    if isinstance(cols, BulkColumns) and cols.n_rows >= RELEASE_ROWS:
        give_back(heap=False)
