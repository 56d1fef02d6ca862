"""Every array's chunk references in one file: ``.h5sidecar/manifests.parq``.

kerchunk's Parquet layout keeps each array's references in its own record files, so reading a
whole granule of a thousand variables means a thousand GETs and a thousand small Parquet
decodes before the first chunk is fetched.  h5sidecar's Parquet sidecars also carry this single
table of every stored and inline chunk (one row per chunk, sorted by array then chunk)::

    array   dictionary<int32, string>   array path
    chunk   int64                       flat C-order chunk number
    url     dictionary<int32, string>   source URL (null for an inline chunk)
    offset  int64                       byte offset in the source (0 for inline)
    size    int64                       byte length (0 for inline)
    raw     binary                      the chunk's bytes when it is held inline, else null

A lazily opened sidecar reads it on the first manifest it needs (one GET, one decode) when it is
small enough (:data:`~h5sidecar.references.parquet_sidecar._parquet_lazy.BULK_LOAD_BYTES`),
else per-array record files as before.  Plain kerchunk/fsspec readers ignore the file.
``chunk`` and ``offset`` use delta encoding (readers here are pyarrow only; fastparquet's delta
decoding is what the record files avoid).
"""

from __future__ import annotations

import io
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._assemble import ChunkColumns
from h5sidecar.references._manifest import INLINE, MISSING, ChunkManifest
from h5sidecar.references._model import GranuleRefs
from h5sidecar.references.datacube._member_table import positions
from h5sidecar.references.datacube._url_column import UrlColumn, arrow_urls, distinct_urls
from h5sidecar.references.parquet_sidecar import _manifests_pieces
from h5sidecar.references.parquet_sidecar._manifests_file_small import (
    SMALL_ROWS,
    SmallBulkColumns,
    array_names,
    decode_small,
)

__all__ = [
    "MANIFESTS_FILE",
    "WRITE_OPTIONS",
    "BulkColumns",
    "decode_manifests",
    "encode_manifests",
    "join_parts",
    "manifests_table",
]

MANIFESTS_FILE = ".h5sidecar/manifests.parq"


class _UrlCodes:
    """Each URL's code in the file's URL dictionary (first appearance first), by URL tuple.

    A cube's arrays share one URL tuple of every member's URL: when the first tuple coded
    lists no URL twice, it *is* the dictionary's start (codes 0..n-1), and no ``str -> int``
    mapping of it is made (~130 bytes a member at a million) unless another tuple comes.
    """

    def __init__(self) -> None:
        self.table: Sequence[str] = []
        self._index: dict[str, int] | None = {}
        # by tuple id, the tuple kept with its codes (its id is not reused while this runs)
        self._coded: dict[int, tuple[Sequence[str], np.ndarray]] = {}

    def __call__(self, urls: Sequence[str]) -> np.ndarray:
        if id(urls) in self._coded:
            return self._coded[id(urls)][1]
        if not urls:
            codes = np.zeros(1, np.int32)
        elif not self.table and distinct_urls(urls):
            self.table, self._index = urls, None
            codes = np.arange(len(urls), dtype=np.int32)
        else:
            if self._index is None:  # the first tuple's mapping, made now
                self.table = list(self.table)
                self._index = {u: i for i, u in enumerate(self.table)}
            index, table = self._index, self.table
            assert isinstance(table, list)

            def code(u: str) -> int:
                if u not in index:
                    index[u] = len(table)
                    table.append(u)
                return index[u]

            codes = np.fromiter(map(code, urls), np.int32, len(urls))
        self._coded[id(urls)] = (urls, codes)
        return codes


#: How the file is written (Parquet options): dictionary-encoded names, delta-coded numbers.
WRITE_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 3,
    "use_dictionary": ["array", "url"],
    "column_encoding": {"chunk": "DELTA_BINARY_PACKED", "offset": "DELTA_BINARY_PACKED"},
    "store_schema": False,
}


def encode_manifests(refs: GranuleRefs) -> bytes:
    """The bytes of :data:`MANIFESTS_FILE` for ``refs`` (loads every manifest).

    Each array's rows are one Arrow chunk of every column, written as one table: the file is
    the one their concatenation gives, but no column is copied whole (a cube of a million
    members has two or three million rows, ~30 bytes a row a copy).  A file of more than
    :data:`~h5sidecar.references.parquet_sidecar._manifests_pieces.PIECE_ROWS` rows is
    written in row groups of that many, each with the URL dictionary of its own rows.
    """
    table = manifests_table(refs)
    buf = io.BytesIO()
    rows = _manifests_pieces.PIECE_ROWS
    if table.num_rows > rows:  # a cube's: row groups, each on its own URLs
        _manifests_pieces.write_pieces(table, buf, rows, **WRITE_OPTIONS)
    else:  # one row group on the one dictionary (every granule's file, as before)
        pq.write_table(table, buf, **WRITE_OPTIONS)
    return buf.getvalue()


def manifests_table(refs: GranuleRefs, starts: Mapping[str, int] | None = None) -> pa.Table:
    """The file's rows of every array of ``refs`` (missing chunks left out), one Arrow chunk
    an array; ``starts``: array path -> the chunk number of its manifest's first chunk (an
    append's tail; 0 for arrays not named)."""
    url_codes_of = _UrlCodes()
    kept = []
    for i, (path, arr) in enumerate(refs.arrays.items()):
        codes = arr.manifest.codes.reshape(-1)
        keep = np.flatnonzero((codes >= 0) | (codes == INLINE))  # not the missing ones
        if keep.size:
            kept.append((i, arr.manifest, keep, url_codes_of(arr.manifest.urls),
                         (starts or {}).get(path, 0)))
    # the URL dictionary complete before the first chunk: every chunk of ``url`` shares it
    # (chunks with other dictionaries would make the writer store the column plain)
    dicts = pa.array(list(refs.arrays), pa.string()), arrow_urls(url_codes_of.table)
    chunks = [_array_rows(i, m, keep, local, *dicts, start) for i, m, keep, local, start in kept]
    del kept
    if not chunks:
        chunks = [_array_rows(0, None, np.zeros(0, np.int64), np.zeros(0, np.int32), *dicts)]
    table = pa.table({k: pa.chunked_array([c[k] for c in chunks]) for k in chunks[0]})
    del chunks
    return table


def _array_rows(
    i: int, m: ChunkManifest | None, keep: np.ndarray, local: np.ndarray,
    array_dict: pa.Array, url_dict: pa.Array, start: int = 0,
) -> dict[str, pa.Array]:
    """The file's rows of array number ``i`` (its chunks ``keep`` of ``m``; ``local``: its URL
    codes in ``url_dict``), one Arrow array a column, on numpy's buffers where Arrow allows."""
    if m is None:  # no array has a chunk: the columns' types alone
        offsets = lengths = np.zeros(0, np.int64)
        kc = np.zeros(0, np.int32)
    else:
        kc = m.codes.reshape(-1)[keep]
        # uint64 in the manifest, int64 in the file (offsets and lengths are < 2**63)
        offsets = m.offsets.reshape(-1)[keep].view(np.int64)
        lengths = m.lengths.reshape(-1)[keep].view(np.int64)
    stored = kc >= 0
    inline = np.flatnonzero(~stored).tolist()  # every chunk kept is stored or inline
    url = local[np.where(stored, kc, 0)] if local.size else np.zeros(kc.size, np.int32)
    raw: list[bytes | None] = [None] * keep.size if inline else []
    for row in inline:
        raw[row] = m.inline[int(keep[row])]  # type: ignore[union-attr]
    return {
        "array": pa.DictionaryArray.from_arrays(pa.array(np.full(keep.size, i, np.int32)),
                                                array_dict),
        "chunk": pa.array(keep + start if start else keep),
        "url": pa.DictionaryArray.from_arrays(
            pa.array(url, pa.int32(), mask=~stored if inline else None), url_dict),
        "offset": pa.array(offsets),
        "size": pa.array(lengths),
        "raw": pa.array(raw, pa.binary()) if inline else pa.nulls(keep.size, pa.binary()),
    }


def decode_manifests(
    data: bytes | Sequence[tuple[bytes, Sequence[str], bool]],
    metas: Mapping[str, ArrayMeta],
    others: Collection[str] = (),
) -> BulkColumns | SmallBulkColumns:
    """Chunk columns of every array in ``metas`` from :data:`MANIFESTS_FILE`'s bytes (arrays
    absent from the file have no stored chunks); each array's are cut out on first access.
    ``others``: the sidecar's arrays left out of ``metas`` (an open of a few named arrays),
    which the file may name too.  ``data`` may be a cube's parts instead, each with the arrays
    it gives whole (:mod:`~h5sidecar.references.parquet_sidecar._manifests_parts`): their rows
    are joined in order, those a later part supersedes left out.  A small file (few chunks) is decoded in plain Python
    (:mod:`~h5sidecar.references.parquet_sidecar._manifests_file_small`), with the same checks.

    Raises
    ------
    InvalidReferenceError
        When the file is unreadable, lacks a column, names an unknown array or holds a chunk
        number outside its array's grid.
    """
    need = {"array", "chunk", "url", "offset", "size", "raw"}
    tables = []
    for d in [data] if isinstance(data, bytes) else [d for d, *_ in data]:
        try:
            table = _read(_file(d), metas if others else None)
        except (pa.ArrowException, OSError) as exc:
            raise InvalidReferenceError(
                f"{MANIFESTS_FILE} is not a readable Parquet file ({exc}); it may be truncated: "
                "re-create the sidecar"
            ) from exc
        if need - set(table.column_names):
            raise InvalidReferenceError(
                f"{MANIFESTS_FILE} lacks column(s) {sorted(need - set(table.column_names))}"
            )
        tables.append(table)
    if isinstance(data, bytes):
        table = tables[0]
    else:
        try:
            table = join_parts(tables, [w for _, w, _ in data], [o for *_, o in data])
        except pa.ArrowException as exc:
            raise InvalidReferenceError(
                f"{MANIFESTS_FILE}: its parts' columns do not join ({exc}); re-create the "
                "sidecar") from exc
        del tables
    if others:  # an open of a few named arrays: the file's names checked, their rows kept
        array_names(table, metas, others, MANIFESTS_FILE)
        table = _only(table, metas)
    if table.num_rows <= SMALL_ROWS:  # a granule of few chunks: plain Python is cheaper
        return decode_small(table, metas, others, MANIFESTS_FILE)
    arrays, names = array_names(table, metas, others, MANIFESTS_FILE)
    idx = arrays.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.argsort(idx, kind="stable")
    idx = idx[order]
    url = table.column("url").combine_chunks()
    if not pa.types.is_dictionary(url.type):
        url = url.dictionary_encode()
    raw = table.column("raw").combine_chunks().take(pa.array(order))
    offset, size = _ints(table, "offset")[order], _ints(table, "size")[order]
    stored = raw.is_valid().to_numpy(zero_copy_only=False) == 0
    codes = url.indices.to_numpy(zero_copy_only=False)
    has_url = url.is_valid().to_numpy(zero_copy_only=False)[order]
    if not has_url[stored].all():
        raise InvalidReferenceError(f"{MANIFESTS_FILE}: a chunk reference has no URL")
    bad = stored & ((offset < 0) | (size <= 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidReferenceError(
            f"{MANIFESTS_FILE}: chunk reference with offset {int(offset[i])} and length "
            f"{int(size[i])}; offsets must be >= 0 and lengths > 0: re-create the sidecar"
        )
    return BulkColumns(
        names=names,
        bounds=np.searchsorted(idx, np.arange(len(names) + 1)),
        chunk=_ints(table, "chunk")[order],
        offset=offset,
        size=size,
        url=url.take(pa.array(order)),
        url_codes=np.where(has_url, codes[order] if codes.size else codes, -1).astype(np.int64),
        urls=url.dictionary,
        raw=raw,
        metas=metas,
    )


def join_parts(tables: Sequence[pa.Table], wholes: Sequence[Sequence[str]],
               over: Sequence[bool] = ()) -> pa.Table:
    """The rows of ``tables`` (parts in order), each part's rows of an array a later part
    gives whole (``wholes``) dropped, and of a chunk a later part marked ``over`` holds too
    (a member replaced in place), joined (their dictionaries kept per chunk)."""
    kept = []
    overs = [_chunks_by_array(t) if k < len(over) and over[k] else {}
             for k, t in enumerate(tables)]
    for k, table in enumerate(tables):
        later = sorted({w for ws in wholes[k + 1:] for w in ws})
        if later and table.num_rows:
            names = pc.cast(table.column("array"), pa.string())
            table = table.filter(pc.invert(pc.is_in(names, value_set=pa.array(later,
                                                                             pa.string()))))
        for chunks in overs[k + 1:]:
            if chunks and table.num_rows:
                table = table.filter(pc.invert(_held(table, chunks)))
        kept.append(table)
    names = ["array", "chunk", "url", "offset", "size", "raw"]
    schema = kept[0].select(names).schema
    return pa.concat_tables([t.select(names).cast(schema) for t in kept])


def _chunks_by_array(table: pa.Table) -> dict[str, pa.Array]:
    """Array name -> the chunk numbers ``table`` (a part's rows) holds of it."""
    names = pc.cast(table.column("array"), pa.string()).combine_chunks()
    chunks = table.column("chunk").combine_chunks()
    return {a: pc.unique(chunks.filter(pc.equal(names, a)))
            for a in pc.unique(names).to_pylist() if a is not None}


def _held(table: pa.Table, chunks: Mapping[str, pa.Array]) -> pa.Array:
    """Whether each row of ``table`` is of a chunk of ``chunks`` (array -> chunk numbers):
    the chunk numbers compared first (integers), then the array names of the rows that match
    alone (not every row's name made a string: a cube's first part holds millions)."""
    column = table.column("chunk")
    numbers = pc.unique(pa.concat_arrays([c.cast(column.type) for c in chunks.values()]))
    hit = pc.fill_null(pc.is_in(column, value_set=numbers), False).to_numpy(
        zero_copy_only=False).copy()
    rows = np.flatnonzero(hit)
    if rows.size:
        at = pa.array(rows, pa.int64())
        names = pc.cast(table.column("array").take(at), pa.string()).combine_chunks()
        found = column.take(at).combine_chunks()
        mine = np.zeros(rows.size, bool)
        for a, values in chunks.items():
            mine |= pc.fill_null(pc.and_(pc.equal(names, a), pc.is_in(found, value_set=values)),
                                 False).to_numpy(zero_copy_only=False)
        hit[rows] = mine
    return pa.array(hit)


def _file(data: bytes) -> pq.ParquetFile:
    return pq.ParquetFile(pa.BufferReader(data), read_dictionary=["array", "url"])


def _read(f: pq.ParquetFile, metas: Mapping[str, ArrayMeta] | None) -> pa.Table:
    """The file's rows; with ``metas`` (an open of a few arrays), only the row groups that
    hold one of theirs: the ``array`` column of every group is read first (a few bytes a
    row), then the wanted groups whole.  A cube's coordinate is in one group of the tens a
    million members make, so the other arrays' rows are never decoded (~180 MB at a million
    members).  A file of one row group is read as it is."""
    groups = f.metadata.num_row_groups
    if metas is None or groups < 2:
        return f.read(use_threads=False)
    wanted = pa.array(list(metas), pa.string())
    keep = []
    for i in range(groups):
        names = f.read_row_group(i, columns=["array"], use_threads=False).column("array")
        if not names.num_chunks:
            continue
        arrays = names.combine_chunks()
        if not pa.types.is_dictionary(arrays.type):
            return f.read(use_threads=False)  # refused as it is by array_names
        used = arrays.dictionary.take(pc.unique(arrays.indices))  # (a dictionary may list more)
        if pc.any(pc.is_in(used, value_set=wanted)).as_py():
            keep.append(i)
    return f.read_row_groups(keep, use_threads=False) if keep else f.schema_arrow.empty_table()


def _only(table: pa.Table, metas: Mapping[str, ArrayMeta]) -> pa.Table:
    """The rows of ``metas``' arrays, with dictionaries of only the values they use: an open of
    a few named arrays (a cube's coordinates) decodes, checks and holds their rows alone, not
    every array's (a cube's chunk URLs are its members': a Python string each)."""
    arrays = table.column("array").combine_chunks()
    if not pa.types.is_dictionary(arrays.type):
        return table  # refused as it is by array_names
    keep = [i for i, n in enumerate(arrays.dictionary.to_pylist()) if n in metas]
    mask = pc.is_in(arrays.indices, value_set=pa.array(keep, arrays.indices.type))
    kept = table.filter(mask)
    out = {}
    for name in kept.column_names:
        col = kept.column(name)
        if pa.types.is_dictionary(col.type):  # re-coded: the values these rows use
            col = _first_used(col.combine_chunks())
        out[name] = col
    return pa.table(out)


def _first_used(col: pa.DictionaryArray) -> pa.DictionaryArray:
    """``col`` on a dictionary of only the values its rows use, in the order they first
    appear, as ``dictionary_encode`` of its values gives, by renumbering its codes (a cube's
    chunk URLs are not made into strings again: a million of them)."""
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    codes = col.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    used, first = np.unique(codes[valid], return_index=True)
    order = used[np.argsort(first, kind="stable")]
    remap = np.zeros(len(col.dictionary) or 1, np.int32)
    remap[order] = np.arange(order.size, dtype=np.int32)
    return pa.DictionaryArray.from_arrays(
        pa.array(remap[codes], pa.int32(), mask=None if valid.all() else ~valid),
        col.dictionary.take(pa.array(order, pa.int64())))


class BulkColumns(Mapping[str, ChunkColumns]):
    """Array path -> :class:`ChunkColumns`, cut out of the decoded table when first asked
    (a read of a few arrays pays for those only).  Every array of the metadata is a key."""

    def __init__(
        self,
        *,
        names: list[str],
        bounds: np.ndarray,
        chunk: np.ndarray,
        offset: np.ndarray,
        size: np.ndarray,
        url: pa.Array,
        url_codes: np.ndarray,
        urls: pa.Array,
        raw: pa.Array,
        metas: Mapping[str, ArrayMeta],
    ) -> None:
        self._rows = {n: (int(bounds[i]), int(bounds[i + 1])) for i, n in enumerate(names)}
        self._chunk, self._offset, self._size = chunk, offset, size
        self._url, self._raw = url, raw
        self._url_codes, self._urls = url_codes, urls
        # by URL order (its id; the object kept so the id stays its own): where each of the
        # file's URLs is in it (a cube's arrays share one: every member's URL)
        self._positions: dict[int, tuple[object, np.ndarray]] = {}
        self._has_raw = raw.is_valid().to_numpy(zero_copy_only=False)
        self._metas = metas
        self._out_of_grid = self._arrays_out_of_grid(names, bounds)

    def _arrays_out_of_grid(self, names: list[str], bounds: np.ndarray) -> frozenset[str]:
        """The arrays with a chunk number outside their grid, found for every row at once
        (:meth:`manifest` then checks no array alone)."""
        counts = np.diff(bounds)
        grids = np.array([math.prod(self._metas[n].grid_shape) if n in self._metas else 0
                          for n in names], dtype=np.int64)
        bad = (self._chunk < 0) | (self._chunk >= np.repeat(grids, counts))
        if not bad.any():
            return frozenset()
        rows = np.flatnonzero(bad)
        return frozenset(names[int(i)] for i in np.searchsorted(bounds, rows, side="right") - 1)

    @property
    def n_rows(self) -> int:
        """The chunks of every array in the file (stored and inline)."""
        return len(self._chunk)

    @property
    def url_dictionary(self) -> pa.Array:
        """Every URL the file's chunks use, in the order their codes number them."""
        return self._urls

    def within_sources(self, limit: np.ndarray) -> bool:
        """True when no stored chunk of any array ends past its source's size (``limit``: the
        size of each URL of :attr:`url_dictionary`, -1 where unknown); a reader then checks no
        manifest alone (see :func:`~h5sidecar.references._assemble._check_within_source`)."""
        stored = ~self._has_raw
        if not stored.any():
            return True
        limit = limit if limit.size else np.full(1, -1, np.int64)
        codes = self._url_codes[stored]
        ends = self._offset[stored] + self._size[stored]
        known = limit[codes] >= 0
        return not bool((ends[known] > limit[codes][known]).any())

    def __getitem__(self, name: str) -> ChunkColumns:
        if name not in self._metas:
            raise KeyError(name)
        a, b = self._rows.get(name, (0, 0))
        if a == b:
            return ChunkColumns()
        n = int(np.prod(self._metas[name].grid_shape, dtype=np.int64))
        flat = self._chunk[a:b]
        if flat.min() < 0 or flat.max() >= n:
            raise InvalidReferenceError(
                f"{MANIFESTS_FILE}: {name} has a chunk number outside its {n} chunks; the "
                "sidecar is corrupt: re-create it"
            )
        stored = ~self._has_raw[a:b]
        rows = np.flatnonzero(stored) + a
        return ChunkColumns(
            flat=flat[stored],
            urls=self._url.slice(a, b - a).filter(pa.array(stored)).cast(pa.string()),
            offsets=self._offset[rows],
            lengths=self._size[rows],
            inline={int(self._chunk[r]): self._raw[int(r)].as_py() for r in np.flatnonzero(~stored) + a},
        )

    def manifest(self, name: str, url_order: Sequence[str] | None,
                 url_column: pa.ChunkedArray | None = None) -> ChunkManifest:
        """``name``'s :class:`ChunkManifest`, built with numpy alone (the columns were checked
        when the file was decoded; ``url_order`` is the array's URL list from the extras, and
        ``url_column`` the same URLs in Arrow when the caller has them: a cube's members').

        The file's URLs are placed in ``url_order`` by Arrow (:func:`positions`), once per
        order, with no Python string or dict entry a URL (a cube's manifests name every
        member: a million).
        """
        meta = self._metas[name]
        grid = meta.grid_shape
        n = int(np.prod(grid, dtype=np.int64))
        a, b = self._rows.get(name, (0, 0))
        if name in self._out_of_grid:
            raise InvalidReferenceError(
                f"{MANIFESTS_FILE}: {name} has a chunk number outside its {n} chunks; the "
                "sidecar is corrupt: re-create it"
            )
        stored = ~self._has_raw[a:b]
        if len(self._urls) == 1:  # one source (most granules): no search for the codes used
            used = np.zeros(1 if stored.any() else 0, np.int64)
        else:
            used = np.unique(self._url_codes[a:b][stored])
        remap = np.full(len(self._urls) or 1, -1, np.int32)
        urls: Sequence[str]
        if url_order is None:
            urls = tuple(self._urls.take(pa.array(used, pa.int64())).to_pylist())
            remap[used] = np.arange(used.size, dtype=np.int32)
        else:
            urls = (url_order if isinstance(url_order, (tuple, UrlColumn))
                    else tuple(url_order))
            where = self._placed(url_order, url_column)[used] if used.size else used
            if (where < 0).any():
                lost = self._urls[int(used[np.argmax(where < 0)])].as_py()
                raise InvalidReferenceError(
                    f"{MANIFESTS_FILE}: {name}: chunk URL {lost!r} is not among the array's "
                    "URLs in the extras; the sidecar is inconsistent: re-create it"
                )
            remap[used] = where
        codes = np.full(n, MISSING, np.int32)
        offsets = np.zeros(n, np.uint64)
        lengths = np.zeros(n, np.uint64)
        rows = np.flatnonzero(stored) + a
        codes[self._chunk[rows]] = remap[self._url_codes[rows]]
        offsets[self._chunk[rows]] = self._offset[rows]
        lengths[self._chunk[rows]] = self._size[rows]
        inline = {int(self._chunk[r]): self._raw[int(r)].as_py() for r in np.flatnonzero(~stored) + a}
        codes[list(inline)] = INLINE
        return ChunkManifest.from_arrays(
            urls=urls,
            codes=codes.reshape(grid),
            offsets=offsets.reshape(grid),
            lengths=lengths.reshape(grid),
            inline=inline,
        )

    def _placed(self, order: Sequence[str], column: pa.ChunkedArray | None) -> np.ndarray:
        """Where each of the file's URLs is in ``order`` (-1: not in it), once per order."""
        hit = self._positions.get(id(order))
        if hit is None:
            if column is None or len(column) != len(order):
                column = pa.chunked_array([pa.array(list(order), pa.string())], pa.string())
            hit = self._positions[id(order)] = order, positions(self._urls, column)
        return hit[1]

    def __iter__(self) -> Iterator[str]:
        return iter(self._metas)

    def __len__(self) -> int:
        return len(self._metas)


def _ints(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if not pa.types.is_integer(col.type) or col.null_count:
        raise InvalidReferenceError(f"{MANIFESTS_FILE}: '{name}' must be a non-null integer column")
    return col.to_numpy().astype(np.int64)
