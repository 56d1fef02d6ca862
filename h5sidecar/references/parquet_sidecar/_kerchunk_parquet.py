"""kerchunk Parquet references: the directory layout fsspec's ``LazyReferenceMapper`` reads.

Layout (``record_size`` chunks per file, flat C-order chunk index ``k`` of array ``var`` lives in
``var/refs.{k // record_size}.parq`` at row ``k % record_size``)::

    granule.h5.parq/
      .zmetadata                   {"metadata": {consolidated Zarr v2 metadata},
                                    "record_size": N, "zarr_consolidated_format": 1,
                                    "h5sidecar": {extras}}           <- written last (commit)
      gt1l/heights/h_ph/refs.0.parq   columns path, offset, size, raw
      gt1l/heights/h_ph/refs.1.parq
      .h5sidecar/checksums.parq    only with checksums: array (dictionary), checksum (uint64)
      .h5sidecar/manifests.parq    every array's chunks in one table (see ``_manifests_file``)
      .h5sidecar/members.parq      a cube's members (see ``_members_file``)

The **compact layout** (``layout="compact"``) writes ``.zmetadata`` and the
``.h5sidecar/`` files only (manifests, and checksums when recorded): no record files, so a granule of a thousand variables is two or
three objects instead of a thousand.  Its extras say ``"layout": "compact"`` and its
``.zmetadata`` has no ``record_size``: fsspec's ``LazyReferenceMapper`` (and so kerchunk and
every plain reader built on it) then fails on opening with ``KeyError: 'record_size'`` instead
of taking the absent record files for missing chunks and returning fill values.  h5sidecar's
readers always read the manifests file of a compact sidecar (one GET for every array).

Written by :mod:`~h5sidecar.references.parquet_sidecar._parquet_write`; read here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ujson

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._assemble import ChunkColumns, assemble, build_metas
from h5sidecar.references._extras import parse_extras
from h5sidecar.references._extras_versions import EXTRAS_KEY
from h5sidecar.references._model import GranuleRefs
from h5sidecar.references._zmeta import split_metadata
from h5sidecar.references.parquet_sidecar._manifests_file import (
    MANIFESTS_FILE,
    decode_manifests,
)
from h5sidecar.references.parquet_sidecar._manifests_parts import (
    BulkPart,
    bulk_parts,
    fetch_parts,
)

__all__ = [
    "CHECKSUMS_FILE",
    "LAYOUT_KEY",
    "SidecarLayout",
    "MANIFESTS_KEY",
    "ZMETADATA",
    "bulk_file",
    "decode_zmetadata",
    "manifests_parts",
    "read_checksums",
    "read_parquet_parts",
    "read_table",
    "record_columns",
    "record_path",
    "sidecar_layout",
]

ZMETADATA = ".zmetadata"
CHECKSUMS_FILE = ".h5sidecar/checksums.parq"
#: Key of the extras block describing the all-arrays manifest file: ``{"file", "bytes"}``.
MANIFESTS_KEY = "manifests"
#: Key of the extras naming the layout (absent: ``"kerchunk"``, what older sidecars are).
LAYOUT_KEY = "layout"
#: ``"kerchunk"``: record files per array, readable by fsspec/kerchunk (plus the manifests
#: file for h5sidecar); ``"compact"``: ``.zmetadata`` + the manifests file only.
SidecarLayout = Literal["kerchunk", "compact"]
LAYOUTS: tuple[str, ...] = get_args(SidecarLayout)


def record_path(array_path: str, record: int) -> str:
    """Relative path of one record file (``"gt1l/heights/h_ph/refs.0.parq"``)."""
    return f"{array_path}/refs.{record}.parq"


def decode_zmetadata(data: bytes) -> dict[str, Any]:
    """Parse and check a Parquet sidecar's ``.zmetadata`` (``metadata`` + ``record_size``)."""
    try:
        doc = ujson.loads(data)
    except ValueError as exc:
        raise InvalidReferenceError(
            f"{ZMETADATA} of the Parquet sidecar is not valid JSON ({exc}); re-create it"
        ) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
        raise InvalidReferenceError(f"{ZMETADATA} must be an object with a 'metadata' object")
    if sidecar_layout(doc) == "compact":
        if bulk_file(doc) is None:
            raise InvalidReferenceError(
                f"{ZMETADATA} of a compact sidecar does not list {MANIFESTS_FILE}, which holds "
                "its chunk references; re-create the sidecar"
            )
        return doc
    rs = doc.get("record_size")
    if not isinstance(rs, int) or isinstance(rs, bool) or rs < 1:
        raise InvalidReferenceError(f"{ZMETADATA}: record_size must be a positive int, got {rs!r}")
    return doc


def read_parquet_parts(
    zmetadata: Mapping[str, Any], fetch: Callable[[list[str]], Mapping[str, bytes | None]]
) -> GranuleRefs:
    """Rebuild :class:`GranuleRefs` from a parsed ``.zmetadata`` and a file fetcher.

    Parameters
    ----------
    zmetadata : mapping
        The output of :func:`decode_zmetadata`.
    fetch : callable
        ``fetch(list of relative paths) -> {path: bytes or None}``, ``None`` for absent files
        (one call for all record files, so remote stores can fetch them concurrently).
    """
    nodes = split_metadata(zmetadata["metadata"])
    extras = parse_extras(zmetadata[EXTRAS_KEY], fetch) if EXTRAS_KEY in zmetadata else None
    metas = build_metas(nodes, extras)
    sums_wanted = extras is not None and any(a.checksums == "file" for a in extras.arrays.values())
    sums = [CHECKSUMS_FILE] if sums_wanted else []
    parts = manifests_parts(zmetadata)
    if parts is not None:  # one file (or its parts) holds every array's chunks
        blobs = fetch([*(p.file for p in parts), *sums])
        data = fetch_parts(parts, blobs)
        side = read_checksums(blobs.get(CHECKSUMS_FILE)) if sums_wanted else {}
        bulk = decode_manifests(data[0][0] if len(parts) == 1 else data, metas)
        return assemble(nodes, metas, bulk, extras, side)
    rs = int(zmetadata["record_size"])
    wanted = {
        record_path(path, r): (path, r)
        for path, meta in metas.items()
        for r in range(math.ceil(_n_chunks(meta) / rs))
    }
    blobs = fetch([*wanted, *sums])
    per_array: dict[str, list[tuple[int, pa.Table]]] = {p: [] for p in metas}
    for rel, (path, r) in wanted.items():
        blob = blobs.get(rel)
        if blob is not None:  # an absent record: every chunk in it is missing
            per_array[path].append((r, read_table(rel, blob)))
    chunks = {
        p: record_columns(p, metas[p], tables, rs) for p, tables in per_array.items() if tables
    }
    side = read_checksums(blobs.get(CHECKSUMS_FILE)) if sums_wanted else {}
    return assemble(nodes, metas, chunks, extras, side)


def bulk_file(zmetadata: Mapping[str, Any]) -> int | None:
    """Byte size of the sidecar's all-arrays manifest file (of all its parts: see
    :mod:`~h5sidecar.references.parquet_sidecar._manifests_parts`), or None when it has none."""
    parts = manifests_parts(zmetadata)
    return None if parts is None else sum(p.bytes for p in parts)


def manifests_parts(zmetadata: Mapping[str, Any]) -> list[BulkPart] | None:
    """The sidecar's manifests file as parts (one for a plain entry), or None when it has
    none (``InvalidReferenceError`` for a malformed parted entry)."""
    block = zmetadata.get(EXTRAS_KEY)
    entry = block.get(MANIFESTS_KEY) if isinstance(block, dict) else None
    return bulk_parts(entry, ZMETADATA)


def sidecar_layout(zmetadata: Mapping[str, Any]) -> SidecarLayout:
    """The layout a parsed ``.zmetadata`` records: ``"compact"`` or ``"kerchunk"`` (also for
    sidecars written by kerchunk or by h5sidecar before layouts existed).

    Raises
    ------
    InvalidReferenceError
        When the extras name a layout this version does not know.
    """
    block = zmetadata.get(EXTRAS_KEY)
    layout = block.get(LAYOUT_KEY, "kerchunk") if isinstance(block, dict) else "kerchunk"
    if layout not in LAYOUTS:
        raise InvalidReferenceError(
            f"{ZMETADATA} names the sidecar layout {layout!r}, which this h5sidecar does not "
            f"read (it reads {', '.join(LAYOUTS)}); upgrade h5sidecar or re-index"
        )
    return layout  # type: ignore[return-value]


def _n_chunks(meta: ArrayMeta) -> int:
    return int(np.prod(meta.grid_shape, dtype=np.int64))


def read_table(
    rel: str, data: bytes, needs: tuple[str, ...] = ("path", "offset", "size")
) -> pa.Table:
    """Decode one Parquet file ``rel`` of the sidecar, checking it has the columns ``needs``."""
    try:
        # ParquetFile without threads: read_table's dataset machinery and thread pool cost
        # ~15x more than decoding one small record file (935 of them per ATL03 sidecar)
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        raise InvalidReferenceError(
            f"{rel} is not a readable Parquet file ({exc}); it may be truncated: re-create "
            "the sidecar"
        ) from exc
    missing = set(needs) - set(table.column_names)
    if missing:
        raise InvalidReferenceError(f"{rel} lacks column(s) {sorted(missing)}")
    return table


def record_columns(
    path: str, meta: ArrayMeta, tables: list[tuple[int, pa.Table]], record_size: int
) -> ChunkColumns:
    """Concatenate one array's record tables into validated chunk columns."""
    n = _n_chunks(meta)
    flats, urls, offsets, lengths = [], [], [], []
    inline: dict[int, bytes] = {}
    for record, table in tables:
        base = record * record_size
        need = min(record_size, n - base)
        if table.num_rows < need:
            raise InvalidReferenceError(
                f"{record_path(path, record)} has {table.num_rows} rows, expected {need}; "
                "the sidecar is truncated: re-create it"
            )
        table = table.slice(0, need)
        p = table.column("path").combine_chunks()
        if pa.types.is_dictionary(p.type):
            p = p.dictionary_decode()
        if not (
            pa.types.is_string(p.type) or pa.types.is_large_string(p.type) or p.null_count == need
        ):
            raise InvalidReferenceError(f"{record_path(path, record)}: 'path' must be strings")
        off = _ints(table, "offset", path, record)
        size = _ints(table, "size", path, record)
        has_url = p.is_valid().to_numpy(zero_copy_only=False)
        raw = table.column("raw").combine_chunks() if "raw" in table.column_names else None
        has_raw = (
            np.zeros(need, bool) if raw is None else raw.is_valid().to_numpy(zero_copy_only=False)
        )
        rows = np.flatnonzero(has_url & ~has_raw)
        if np.any((off[rows] == 0) & (size[rows] == 0)):
            raise InvalidReferenceError(
                f"{record_path(path, record)}: whole-object references (offset 0, size 0) cannot "
                "be expressed as byte ranges; re-create the references with offsets and lengths"
            )
        flats.append(rows + base)
        urls.append(p.filter(pa.array(has_url & ~has_raw)).cast(pa.string()))
        offsets.append(off[rows])
        lengths.append(size[rows])
        for row in np.flatnonzero(has_raw).tolist():
            inline[base + row] = raw[row].as_py()  # type: ignore[index]
    return ChunkColumns(
        flat=np.concatenate(flats),
        urls=pa.concat_arrays(urls),
        offsets=np.concatenate(offsets),
        lengths=np.concatenate(lengths),
        inline=inline,
    )


def _ints(table: pa.Table, name: str, path: str, record: int) -> np.ndarray:
    col = table.column(name)
    if not pa.types.is_integer(col.type) or col.null_count:
        raise InvalidReferenceError(
            f"{record_path(path, record)}: '{name}' must be a non-null integer column"
        )
    return col.to_numpy().astype(np.int64)


def read_checksums(data: bytes | None) -> dict[str, np.ndarray]:
    """Array path -> flat uint64 checksums, from the checksums side file's bytes."""
    if data is None:
        raise InvalidReferenceError(
            f"{CHECKSUMS_FILE} is missing though the extras list checksums; re-create the sidecar"
        )
    table = read_table(CHECKSUMS_FILE, data, needs=("array", "checksum"))
    names = table.column("array").combine_chunks()
    if pa.types.is_dictionary(names.type):
        names = names.dictionary_decode()
    values = table.column("checksum").to_numpy()
    encoded = names.dictionary_encode()
    idx = encoded.indices.to_numpy(zero_copy_only=False)
    return {
        name: values[idx == i].astype(np.uint64)
        for i, name in enumerate(encoded.dictionary.to_pylist())
    }
