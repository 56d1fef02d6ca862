"""Writing kerchunk Parquet sidecars: record files, checksums, the manifests and members files,
and ``.zmetadata`` (the layout is described in
:mod:`~h5sidecar.references.parquet_sidecar._kerchunk_parquet`).

Rows encode a chunk exactly as fsspec's writer does: a byte range is ``(url, offset, size,
null)``, an inline chunk ``(null, 0, 0, bytes)``, a missing chunk ``(null, 0, 0, null)``; a 0-d
array has one row (fsspec maps its key ``"0"`` to chunk 0).  A record whose chunks are all
missing gets no file at all: fsspec, like kerchunk, reads an absent record as missing keys.

``path`` is Parquet dictionary-encoded (the on-disk form of fsspec's pandas categorical), so a
URL is stored once per file.  ``offset``/``size`` are required int64 columns with statistics:
fastparquet, fsspec's default engine, reads int columns without statistics as float64.  Files
are zstd-compressed without pandas or Arrow schema metadata.  zstd's ratio on these columns is
not monotonic in the level and dictionary-encoding ``size`` helps only when chunk sizes repeat,
so each record is encoded a few ways (:data:`ENCODINGS`) and the smallest file kept; that keeps
our sidecars no larger than kerchunk's.  (``DELTA_BINARY_PACKED`` would shrink offsets
threefold, but fastparquet decodes large deltas wrongly, so it is not used.)

Leaving out the pandas metadata matters: with it, pandas >= 3 restores ``path`` as a NaN-filled
``str`` column and fsspec takes a missing chunk's NaN for a URL (kerchunk-written sidecars with
missing chunks fail that way); without it fastparquet yields ``None`` and fsspec reports the
key as missing.  fsspec's ``engine="pyarrow"`` still yields NaN under pandas >= 3, so with that
engine a missing chunk inside a record raises instead of reading as the fill value.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ujson

from h5sidecar.references._extras import build_extras
from h5sidecar.references._extras_versions import EXTRAS_KEY
from h5sidecar.references._manifest import INLINE, ChunkManifest
from h5sidecar.references._model import ArrayRefs, GranuleRefs
from h5sidecar.references.datacube._member_table import MemberTable
from h5sidecar.references.datacube._url_column import arrow_urls
from h5sidecar.references.json_sidecar._kerchunk_json import json_default
from h5sidecar.references.parquet_sidecar._kerchunk_parquet import (
    CHECKSUMS_FILE,
    LAYOUT_KEY,
    LAYOUTS,
    MANIFESTS_KEY,
    ZMETADATA,
    SidecarLayout,
    record_path,
)
from h5sidecar.references.parquet_sidecar._manifests_file import MANIFESTS_FILE, encode_manifests
from h5sidecar.references.parquet_sidecar._members_file import (
    MEMBERS_KEY,
    encode_members,
)

__all__ = [
    "DEFAULT_RECORD_SIZE",
    "ENCODINGS",
    "RECORD_FIELDS",
    "UrlDicts",
    "encode_parquet",
    "record_tables",
    "smallest_file",
]

#: Chunks per record file (kerchunk's ``refs_to_dataframe`` default).
DEFAULT_RECORD_SIZE = 100_000
#: (dictionary-encoded columns, zstd level) tried for every record file; the smallest wins.
ENCODINGS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("path", "size"), 3),
    (("path",), 9),
    (("path", "size"), 9),
)
RECORD_FIELDS = (
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("size", pa.int64(), nullable=False),
    pa.field("raw", pa.binary()),
)


def encode_parquet(
    refs: GranuleRefs,
    *,
    record_size: int = DEFAULT_RECORD_SIZE,
    manifests_file: bool = True,
    layout: SidecarLayout = "kerchunk",
) -> Iterator[tuple[str, bytes]]:
    """Yield ``(relative path, bytes)`` of every file of the Parquet sidecar, ``.zmetadata`` last.

    Writers must store the files in this order: ``.zmetadata`` is the commit marker.
    ``layout="compact"`` writes no record files (and always the manifests file).
    """
    if not isinstance(record_size, int) or record_size < 1:
        raise ValueError(f"record_size must be a positive integer, got {record_size!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    compact = layout == "compact"
    url_dicts = UrlDicts()
    for path, arr in () if compact else refs.arrays.items():
        m = arr.manifest  # (a lazy sidecar's: loaded once)
        for record, table in record_tables(m, record_size, url_dicts(m.urls)):
            data = smallest_file(table)
            del table  # not held while the next record is built
            yield record_path(path, record), data
    del url_dicts
    with_sums = [a for a in refs.arrays.values() if a.checksums is not None]
    if with_sums:
        yield CHECKSUMS_FILE, _parquet_bytes(_checksum_table(with_sums), ("array",), 3, False)
    extras = build_extras(refs, checksums="file", members_file=bool(refs.members))
    if refs.members:  # a cube: its members in their own file, read when first needed
        table = refs.members
        files, extras[MEMBERS_KEY] = encode_members(
            table if isinstance(table, MemberTable) else MemberTable.of(table))
        while files:
            yield files.pop(0)  # not held after it is written
    if manifests_file or compact:
        bulk = encode_manifests(refs)
        yield MANIFESTS_FILE, bulk
        extras[MANIFESTS_KEY] = {"file": MANIFESTS_FILE, "bytes": len(bulk)}
    zmeta: dict[str, Any] = {"metadata": refs.zmetadata(), "record_size": record_size}
    if compact:
        # no record_size: fsspec's LazyReferenceMapper fails on it at once, where with one it
        # would read the absent record files as missing chunks (fill values, silently)
        del zmeta["record_size"]
        extras[LAYOUT_KEY] = "compact"
    zmeta.update({"zarr_consolidated_format": 1, EXTRAS_KEY: extras})
    text = ujson.dumps(
        zmeta, escape_forward_slashes=False, ensure_ascii=False, default=json_default
    )
    yield ZMETADATA, text.encode("utf-8")


def smallest_file(table: pa.Table) -> bytes:
    """The smallest of the :data:`ENCODINGS` of a record table."""
    candidates = (_parquet_bytes(table, d, lvl, ["offset", "size"]) for d, lvl in ENCODINGS)
    return min(candidates, key=len)


def _parquet_bytes(
    table: pa.Table, dictionary: tuple[str, ...], level: int, statistics: list[str] | bool
) -> bytes:
    buf = io.BytesIO()
    pq.write_table(
        table,
        buf,
        compression="zstd",
        compression_level=level,
        use_dictionary=list(dictionary),
        write_statistics=statistics,
        store_schema=False,
    )
    return buf.getvalue()


class UrlDicts:
    """Each URL tuple as an Arrow string array, the last one kept: a cube's arrays share one
    tuple of every member's URL, made into Arrow once (not once an array, ~60 MB each at a
    million members)."""

    def __init__(self) -> None:
        self._last: tuple[Sequence[str], pa.Array] | None = None

    def __call__(self, urls: Sequence[str]) -> pa.Array:
        if self._last is None or self._last[0] is not urls:
            self._last = None  # the previous one freed before the next is made
            self._last = (urls, arrow_urls(urls))  # a cube's URL column: itself, no copy
        return self._last[1]


def record_tables(
    m: ChunkManifest, record_size: int, url_dict: pa.Array, start: int = 0
) -> Iterator[tuple[int, pa.Table]]:
    """One table per record of ``m`` holding at least one stored or inline chunk
    (``url_dict``: its URLs as Arrow strings).

    ``start``: the array's chunk number of ``m``'s first chunk (an append's tail: records are
    numbered, and cut, as the whole array's); the first record's table then holds only the
    rows from ``start`` on, and is yielded even when all its chunks are missing.
    """
    codes = m.codes.reshape(-1)
    offsets = m.offsets.reshape(-1)
    lengths = m.lengths.reshape(-1)
    first = start // record_size
    for record in range(first, math.ceil((start + codes.size) / record_size)):
        sl = slice(max(record * record_size - start, 0), (record + 1) * record_size - start)
        rc = codes[sl]
        stored = rc >= 0
        inline = rc == INLINE
        if not (stored.any() or inline.any() or (record == first and start % record_size)):
            continue
        path = pa.DictionaryArray.from_arrays(
            pa.array(np.where(stored, rc, 0), type=pa.int32(), mask=~stored), url_dict
        ).dictionary_decode()
        table = pa.Table.from_arrays(
            [
                path,
                pa.array(np.where(stored, offsets[sl], 0).astype(np.int64)),
                pa.array(np.where(stored, lengths[sl], 0).astype(np.int64)),
                _raw_column(m.inline, sl.start, np.flatnonzero(inline), rc.size),
            ],
            schema=pa.schema([pa.field("path", path.type), *RECORD_FIELDS]),
        )
        yield record, table
        del path, table  # freed by the caller before the next record's columns are made


def _raw_column(inline: Mapping[int, bytes], base: int, rows: np.ndarray, n: int) -> pa.Array:
    if not rows.size:
        return pa.nulls(n, type=pa.binary())
    values: list[bytes | None] = [None] * n
    for row in rows.tolist():
        values[row] = inline[base + row]
    return pa.array(values, type=pa.binary())


def _checksum_table(arrays: list[ArrayRefs]) -> pa.Table:
    names = pa.array([a.path for a in arrays], type=pa.string())
    sizes = [a.manifest.n_chunks for a in arrays]
    index = np.repeat(np.arange(len(arrays), dtype=np.int32), sizes)
    values = np.concatenate([np.asarray(a.checksums, dtype=np.uint64).reshape(-1) for a in arrays])
    return pa.table(
        {"array": pa.DictionaryArray.from_arrays(pa.array(index), names), "checksum": values}
    )
