"""fsspec's kerchunk Parquet reader for ``verify``, with a missing chunk read as missing.

``verify`` reads a kerchunk-layout sidecar the way plain tools do: fsspec's
``LazyReferenceMapper`` maps a key to its record file and row and turns the row into a
reference.  The one step it leaves to pandas is decoding a record file into columns, and
pandas changed it: a missing chunk is a row whose ``path`` is null, which fsspec recognises by
``path is None``; pandas >= 3 reads that null as NaN (its ``str`` dtype), which fsspec then takes
for a URL (``TypeError: argument of type 'float' is not iterable``), whatever the file holds
(a null in a string, large-string or dictionary column, with or without pandas metadata).
fastparquet, fsspec's default engine, still gives ``None`` but is not a dependency and is
deprecated by pandas 3.

:class:`NullKeepingReferenceMapper` keeps fsspec's mapping and decodes record files with
pyarrow straight to NumPy, where a null stays ``None``: what fastparquet gives and fsspec
expects, so the check reads missing chunks as missing whatever pandas does.

This replaces ``LazyReferenceMapper.open_refs``, the per-instance loader its (undocumented)
``setup`` assigns; an fsspec that no longer assigns one keeps its own loader (a test pins that
this fsspec does).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.reference import LazyReferenceMapper

__all__ = ["NullKeepingReferenceMapper", "record_columns_as_fsspec_expects"]

#: A record file of the kerchunk Parquet layout (``VAR/refs.N.parq``).
_RECORD = re.compile(r"/refs\.(\d+)\.parq$")


def record_columns_as_fsspec_expects(data: bytes) -> dict[str, np.ndarray]:
    """Columns of one record file as NumPy arrays, nulls as ``None`` (strings and bytes).

    Parameters
    ----------
    data : bytes
        A ``refs.N.parq`` file (columns ``path``, ``offset``, ``size``, ``raw``).

    Returns
    -------
    dict of str to numpy.ndarray
        One array per column: ``path`` and ``raw`` of dtype object holding ``str``/``bytes`` or
        ``None``, ``offset`` and ``size`` of an integer dtype.
    """
    table = pq.read_table(io.BytesIO(data))
    columns: dict[str, np.ndarray] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_dictionary(column.type):
            # kerchunk's writer stores ``path`` as a pandas categorical (Arrow dictionary)
            column = column.cast(column.type.value_type)
        columns[name] = column.to_numpy(zero_copy_only=False)
    return columns


class NullKeepingReferenceMapper(LazyReferenceMapper):
    """``LazyReferenceMapper`` whose record files are decoded without pandas (nulls stay ``None``).

    Takes ``LazyReferenceMapper``'s arguments; ``engine`` is ignored.
    """

    def setup(self) -> None:
        """Read ``.zmetadata`` as fsspec does, then decode record files with pyarrow."""
        super().setup()
        if "open_refs" not in self.__dict__:  # an fsspec that no longer works this way
            return

        @lru_cache(maxsize=self.cache_size)
        def open_refs(field: str, record: int) -> dict[str, Any]:
            # as fsspec's own loader: an absent file raises FileNotFoundError (a missing record)
            path = self.url.format(field=field, record=record)
            data = self._fetched.get((field, record))
            return record_columns_as_fsspec_expects(
                self.fs.cat_file(path) if data is None else data)  # fmt: skip

        self._fetched: dict[tuple[str, int], bytes] = {}
        self.open_refs = open_refs

    def prefetch(self, fields: Iterable[str]) -> int:
        """Read the record files of ``fields`` now, in one round of concurrent requests;
        returns their bytes.

        ``verify`` reads each variable's records once per check, one request at a time:
        ~900 requests for an ATL03 sidecar of the kerchunk layout.  The sidecar is already
        held whole in memory by then (``read_refs``), so holding its record files too costs
        about as much again.
        """
        if "open_refs" not in self.__dict__:
            self.setup()  # what fsspec does on first use
        if "_fetched" not in self.__dict__:  # an fsspec that no longer works this way
            return 0
        known = set(fields)
        wanted: dict[str, tuple[str, int]] = {}
        for path in self.fs.find(self.root):
            found = _RECORD.search(path)
            if found is None:
                continue
            parts = path[: found.start()].split("/")
            # the field is the longest tail of the folder that names an array
            field = next((f for f in ("/".join(parts[k:]) for k in range(len(parts)))
                          if f in known), None)  # fmt: skip
            if field is not None:
                wanted[path] = (field, int(found.group(1)))
        for path, data in (self.fs.cat(list(wanted)) if wanted else {}).items():
            if path in wanted:  # (else read when asked, as fsspec does)
                self._fetched[wanted[path]] = data
        return sum(len(d) for d in self._fetched.values())
