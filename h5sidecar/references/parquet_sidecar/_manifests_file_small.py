"""The manifests file of a granule with few chunks, decoded in plain Python.

:func:`~h5sidecar.references.parquet_sidecar._manifests_file.decode_manifests` works
column-wise (pyarrow and NumPy over every row), which pays ~40 calls of a few microseconds
each whatever the size: ~0.3 ms for a granule of five one-chunk variables, as much as reading
the Parquet file itself, and then ~50 us per array manifest.  A datacube build decodes one such file per granule, thousands of
them.  Up to :data:`SMALL_ROWS` rows the table is turned into Python lists once and each
array's manifest built from its rows; every check of the column-wise path is made (the same
errors, the same messages), and the manifests are equal.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._assemble import ChunkColumns
from h5sidecar.references._manifest import INLINE, MISSING, ChunkManifest

__all__ = ["SMALL_ROWS", "SmallBulkColumns", "array_names", "decode_small"]

#: Tables up to this many rows (chunks of the whole granule) are decoded in Python.
SMALL_ROWS = 256

#: (chunk number, URL or None, offset, size, inline bytes or None) of one row.
_Row = tuple[int, "str | None", int, int, "bytes | None"]


def _dictionary(col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks()
    return arr if pa.types.is_dictionary(arr.type) else arr.dictionary_encode()


def array_names(table: pa.Table, metas: Mapping[str, ArrayMeta], others: Collection[str],
                file: str) -> tuple[Any, list[str]]:
    """The manifests table's dictionary-encoded ``array`` column and its names, checked: every
    name is an array of the metadata (``metas``) or one of ``others``."""
    arrays = table.column("array").combine_chunks()
    if not pa.types.is_dictionary(arrays.type) or arrays.null_count:
        raise InvalidReferenceError(f"{file}: 'array' must be dictionary-encoded paths")
    names = arrays.dictionary.to_pylist()
    unknown = [n for n in names if n not in metas and n not in others]
    if unknown:
        raise InvalidReferenceError(
            f"{file} names arrays the metadata lacks ({unknown[:3]}); the sidecar is "
            "inconsistent: re-create it"
        )
    return arrays, names


def decode_small(table: pa.Table, metas: Mapping[str, ArrayMeta], others: Collection[str],
                 file: str) -> SmallBulkColumns:
    """:class:`SmallBulkColumns` of a read manifests ``table`` (its columns checked present).

    Raises
    ------
    InvalidReferenceError
        As :func:`~h5sidecar.references.parquet_sidecar._manifests_file.decode_manifests`.
    """
    array_names(table, metas, others, file)
    for name in ("chunk", "offset", "size"):
        col = table.column(name)
        if not pa.types.is_integer(col.type) or col.null_count:
            raise InvalidReferenceError(f"{file}: '{name}' must be a non-null integer column")
    urls = _dictionary(table.column("url")).dictionary.to_pylist()
    cols = table.select(["array", "chunk", "url", "offset", "size", "raw"]).to_pydict()
    rows: dict[str, list[_Row]] = {}
    for name, chunk, url, offset, size, raw in zip(*cols.values(), strict=True):
        if raw is None:
            if url is None:
                raise InvalidReferenceError(f"{file}: a chunk reference has no URL")
            if offset < 0 or size <= 0:
                raise InvalidReferenceError(
                    f"{file}: chunk reference with offset {offset} and length {size}; offsets "
                    "must be >= 0 and lengths > 0: re-create the sidecar"
                )
        rows.setdefault(name, []).append((chunk, url, offset, size, raw))
    return SmallBulkColumns(rows, urls, metas, file)


class SmallBulkColumns(Mapping[str, ChunkColumns]):
    """Array path -> :class:`ChunkColumns` (and :meth:`manifest`) from Python rows; the same
    interface and checks as
    :class:`~h5sidecar.references.parquet_sidecar._manifests_file.BulkColumns`."""

    def __init__(self, rows: dict[str, list[_Row]], urls: list[str],
                 metas: Mapping[str, ArrayMeta], file: str) -> None:
        self._rows = rows
        self._urls = urls  # the file's URL dictionary: the order of an array's URLs
        self._metas = metas
        self._file = file

    def _checked(self, name: str) -> tuple[list[_Row], int]:
        rows = self._rows.get(name, [])
        n = math.prod(self._metas[name].grid_shape)
        if any(r[0] < 0 or r[0] >= n for r in rows):
            raise InvalidReferenceError(
                f"{self._file}: {name} has a chunk number outside its {n} chunks; the "
                "sidecar is corrupt: re-create it"
            )
        return rows, n

    def __getitem__(self, name: str) -> ChunkColumns:
        if name not in self._metas:
            raise KeyError(name)
        if not self._rows.get(name):
            return ChunkColumns()
        rows, _ = self._checked(name)
        stored = [r for r in rows if r[4] is None]
        return ChunkColumns(
            flat=np.array([r[0] for r in stored], np.int64),
            urls=pa.array([r[1] for r in stored], pa.string()),
            offsets=np.array([r[2] for r in stored], np.int64),
            lengths=np.array([r[3] for r in stored], np.int64),
            inline={r[0]: r[4] for r in rows if r[4] is not None},
        )

    def manifest(self, name: str, url_order: Sequence[str] | None,
                 url_column: Any = None) -> ChunkManifest:
        """``name``'s :class:`ChunkManifest` (``url_order``: the array's URL list from the
        extras; else its URLs in the file's order; ``url_column``, the same in Arrow, is for
        :class:`BulkColumns`' sake: a small file's few URLs need no Arrow)."""
        grid = self._metas[name].grid_shape
        rows, n = self._checked(name)
        used = {r[1] for r in rows if r[4] is None}
        if url_order is not None:
            urls = tuple(url_order)
        else:
            urls = tuple(u for u in self._urls if u in used)
        position = {u: i for i, u in enumerate(urls)}
        missing = [u for u in self._urls if u in used and u not in position]
        if missing:
            raise InvalidReferenceError(
                f"{self._file}: {name}: chunk URL {missing[0]!r} is not among the array's "
                "URLs in the extras; the sidecar is inconsistent: re-create it"
            )
        # Python lists, then one array each: a handful of chunks costs less this way than
        # item assignment into NumPy arrays
        codes, offsets, lengths = [MISSING] * n, [0] * n, [0] * n
        inline: dict[int, bytes] = {}
        for chunk, url, offset, size, raw in rows:
            if raw is None:
                codes[chunk] = position[url]  # type: ignore[index]
                offsets[chunk] = offset
                lengths[chunk] = size
        for chunk, _, _, _, raw in rows:
            if raw is not None:  # as the column-wise path: inline rows win over stored ones
                inline[chunk] = bytes(raw)
                codes[chunk] = INLINE
        # every check of ChunkManifest.from_arrays holds by construction: rows are checked
        # (chunk numbers in the grid, stored rows with offset >= 0 and length > 0), codes are
        # positions in ``urls`` or INLINE exactly where ``inline`` has the chunk
        return ChunkManifest.from_checked(
            urls=urls, codes=np.array(codes, np.int32).reshape(grid),
            offsets=np.array(offsets, np.uint64).reshape(grid),
            lengths=np.array(lengths, np.uint64).reshape(grid), inline=inline,
        )  # fmt: skip

    def __iter__(self) -> Iterator[str]:
        return iter(self._metas)

    def __len__(self) -> int:
        return len(self._metas)
