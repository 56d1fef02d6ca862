"""A large manifests file written in row groups, each with a URL dictionary of its own.

Parquet's dictionary encoder memoizes every value of a column chunk (a hash table of the
strings, then the dictionary page).  Written as one row group, a cube's ``url`` column is one
column chunk whose dictionary is every member's URL: at a million members the encoder held
~255 MB for it, the largest transient of a cube's write.  Above :data:`PIECE_ROWS` rows the
file is written a row group of at most that many rows at a time, whose ``url`` dictionary
holds only the URLs its rows use (a cube's rows of one array follow its members, so a piece's
URLs are a run of members), and the encoder's memory is bounded by a piece, not by the cube.

Readers see the same table: pyarrow reads each row group's dictionary and unifies them when
the column's chunks are joined (``combine_chunks``), as
:func:`~h5sidecar.references.parquet_sidecar._manifests_file.decode_manifests` does for a
file of one row group too; files of one row group (every granule's, cubes written before)
read as they did.  A URL used by several pieces is stored in each of their dictionaries (a
cube's second array repeats the first's URLs: its bytes under zstd grow by little).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["PIECE_ROWS", "pieces", "write_pieces"]

#: Rows of one row group of a manifests file written in pieces (larger files only).
PIECE_ROWS = 1 << 16


def write_pieces(table: pa.Table, sink: BinaryIO, rows: int = PIECE_ROWS, **options: object
                 ) -> None:
    """Write ``table`` (its ``url`` column dictionary-encoded on one dictionary) to ``sink`` in
    row groups of ``rows`` rows, each ``url`` chunk on its own rows' URLs only.

    ``options`` are :class:`pyarrow.parquet.ParquetWriter`'s (compression, encodings, ...).
    """
    with pq.ParquetWriter(sink, table.schema, **options) as out:  # type: ignore[arg-type]
        for piece in pieces(table, rows):
            out.write_table(piece, rows)
            del piece  # its dictionary freed before the next piece's is made


def pieces(table: pa.Table, rows: int = PIECE_ROWS) -> Iterator[pa.Table]:
    """``table`` cut into tables of ``rows`` rows, each ``url`` chunk on its own rows' URLs
    (the ``url`` chunks of ``table`` share one dictionary)."""
    for start in range(0, table.num_rows, rows):
        piece = table.slice(start, rows)
        at = piece.schema.get_field_index("url")
        yield piece.set_column(at, "url", _own_dictionary(piece.column("url")))


def _own_dictionary(col: pa.ChunkedArray) -> pa.DictionaryArray:
    """``col`` (chunks on one shared dictionary) as one array on the URLs it uses, in the
    shared dictionary's order."""
    shared = col.chunk(0).dictionary
    indices = pa.chunked_array([c.indices for c in col.chunks], pa.int32()).combine_chunks()
    valid = indices.is_valid().to_numpy(zero_copy_only=False)
    codes = pc.fill_null(indices, 0).to_numpy(zero_copy_only=False)
    used = np.unique(codes[valid])
    local = np.searchsorted(used, codes).astype(np.int32)
    mask = None if valid.all() else ~valid  # inline chunks have no URL
    return pa.DictionaryArray.from_arrays(
        pa.array(local, pa.int32(), mask=mask), shared.take(pa.array(used)))
