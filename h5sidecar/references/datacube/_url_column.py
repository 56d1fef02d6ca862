"""A datacube's member URLs as one Arrow string column (:class:`UrlColumn`), not a tuple of str.

A cube's arrays point into every member's source, so their manifests share one URL table of
every member.  As a tuple of Python strings that table is ~110 bytes a member (the string
object and its slot), held from the members' join to the end of the write, and the writers
made it into Arrow again for each file (the record files' paths, the manifests file's URL
dictionary): ~0.2 GB at a million members at the write's peak.  A :class:`UrlColumn` is the
members' URL column itself (~64 bytes a member, shared with the member table, no copy), a
read-only sequence of str whose items are made when asked for; the Parquet writers take its
Arrow array as it is (:attr:`UrlColumn.arrow`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any, overload

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["UrlColumn", "arrow_urls", "distinct_urls", "repeated_url", "url_chunks"]

#: Items made into strings at a time by iteration.
_SLICE = 10_000
#: Sorted URLs compared at a time (a sorted copy of a million was ~0.1 GB at once).
_SORTED_SLICE = 65_536


class UrlColumn(Sequence[str]):
    """Source URLs in one Arrow string array; a read-only sequence of str (equal to a tuple
    or list of the same strings)."""

    __slots__ = ("_array", "_distinct")

    def __init__(self, array: pa.Array | pa.ChunkedArray, *, distinct: bool | None = None
                 ) -> None:
        # one chunk: itself; several (a cube's members files): kept as they are, not copied
        # into one (joined only when :attr:`arrow` is asked for)
        if isinstance(array, pa.ChunkedArray) and array.num_chunks == 1:
            array = array.chunk(0)
        if not pa.types.is_string(array.type) or array.null_count:
            raise ValueError("a UrlColumn holds non-null Arrow strings")
        self._array = array
        #: whether no URL is listed twice, when known (the members were checked)
        self._distinct = distinct

    @property
    def arrow(self) -> pa.Array:
        """The URLs as an Arrow string array (no copy, but of URLs held in several chunks)."""
        if isinstance(self._array, pa.ChunkedArray):
            return self._array.combine_chunks()
        return self._array

    @property
    def distinct(self) -> bool:
        """Whether no URL is listed twice (found by sorting once, unless known)."""
        if self._distinct is None:
            self._distinct = _distinct(self._array)
        return self._distinct

    def __len__(self) -> int:
        return len(self._array)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> UrlColumn: ...

    def __getitem__(self, index: int | slice) -> str | UrlColumn:
        n = len(self._array)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return UrlColumn(pa.array(self._array.to_pylist()[index], pa.string()))
            return UrlColumn(self._array.slice(start, max(stop - start, 0)),
                             distinct=True if self._distinct else None)
        if not -n <= index < n:
            raise IndexError("URL index out of range")
        return str(self._array[index % n].as_py())

    def take(self, rows: Any) -> UrlColumn:
        """The URLs at ``rows`` (integer indices), in that order."""
        return UrlColumn(self._array.take(pa.array(rows, pa.int64())))

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self._array), _SLICE):
            yield from self._array.slice(start, _SLICE).to_pylist()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UrlColumn):
            return _chunked(self._array).equals(_chunked(other._array))
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == len(self) and all(
                a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"UrlColumn({len(self)} URLs)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (UrlColumn, (self._array,))


def _chunked(urls: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return urls if isinstance(urls, pa.ChunkedArray) else pa.chunked_array([urls])


def _distinct(urls: pa.Array | pa.ChunkedArray) -> bool:
    return repeated_url(urls) is None


def repeated_url(urls: pa.Array) -> str | None:
    """A URL ``urls`` lists more than once, or None.

    Found by sorting (neighbours equal), not by hashing: Arrow's hash of a million URLs held
    ~500 bytes a member at a cube build's peak.  URLs already in increasing order (a DEST
    listed by name: the usual build) need no sort at all: one comparison of neighbours, a bit
    each.  Others are sorted by index and compared a slice of the sorted order at a time (a
    sorted copy of every URL was ~70 bytes a URL at once).
    """
    n = len(urls)
    if n < 2:
        return None
    if pc.all(pc.less(urls.slice(0, n - 1), urls.slice(1))).as_py():
        return None
    order = pc.array_sort_indices(urls)
    for start in range(0, n - 1, _SORTED_SLICE):  # the sorted URLs a slice at a time
        ordered = urls.take(order.slice(start, _SORTED_SLICE + 1))
        same = pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))
        if pc.any(same).as_py():
            return str(ordered[pc.index(same, True).as_py()].as_py())
    return None


def arrow_urls(urls: Sequence[str]) -> pa.Array:
    """``urls`` as an Arrow string array: a :class:`UrlColumn`'s own, else made."""
    if isinstance(urls, UrlColumn):
        return urls.arrow
    return pa.array(urls, type=pa.string())


def url_chunks(urls: Sequence[str]) -> list[pa.Array]:
    """``urls`` as Arrow string arrays: a :class:`UrlColumn`'s own chunks (none joined, no
    copy), else one made."""
    if isinstance(urls, UrlColumn):
        return list(_chunked(urls._array).chunks)
    return [pa.array(urls, type=pa.string())]


def distinct_urls(urls: Sequence[str]) -> bool:
    """Whether ``urls`` lists no URL twice (by sorting: no hash table of every URL)."""
    if isinstance(urls, UrlColumn):
        return urls.distinct
    if len(urls) < 2:
        return True
    ordered = sorted(urls)
    return all(a != b for a, b in itertools.pairwise(ordered))
