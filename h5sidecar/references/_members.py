"""A datacube's member identities as columns (:class:`MemberTable`), not one object each.

A :class:`~h5sidecar.references.SourceInfo` and its field values are ~470 bytes of Python
objects; a cube of a million members held them all from the first batch of its build to its
write.  A :class:`MemberTable` holds the same fields as Arrow columns (~120 bytes a member) and
is a read-only sequence of :class:`SourceInfo`, each made when asked for: a cube's references
(:attr:`~h5sidecar.references.GranuleRefs.members`) may hold one instead of a tuple, and every
reader of the members sees the same identities.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.references._source_info import SourceInfo

__all__ = ["MemberTable"]

#: The columns, in :class:`SourceInfo`'s field order.
_SCHEMA = pa.schema([
    ("url", pa.string()), ("size", pa.int64()), ("etag", pa.string()), ("mtime", pa.float64()),
    ("mtime_ns", pa.int64()), ("inode", pa.int64()), ("ctime_ns", pa.int64()),
    ("device", pa.int64()),
])  # fmt: skip
#: Members made into objects at a time by iteration.
_SLICE = 10_000


class MemberTable(Sequence[SourceInfo]):
    """Source identities in columns; a read-only sequence of :class:`SourceInfo`."""

    __slots__ = ("_table",)

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    @classmethod
    def of(cls, members: Iterable[SourceInfo]) -> MemberTable:
        """The table of ``members`` (in order)."""
        rows = list(members)
        return cls(pa.Table.from_pydict(
            {f.name: [getattr(m, f.name) for m in rows] for f in _SCHEMA}, schema=_SCHEMA))

    @classmethod
    def concat(cls, parts: Sequence[MemberTable]) -> MemberTable:
        """The members of ``parts``, one after the other."""
        if not parts:
            return cls.of(())
        return cls(pa.concat_tables([p._table for p in parts]).combine_chunks())

    @property
    def urls(self) -> pa.ChunkedArray:
        """Every member's URL."""
        return self._table.column("url")

    def duplicate_url(self) -> str | None:
        """A URL listed more than once, or None (each URL must be one member)."""
        urls = self.urls
        if pc.count_distinct(urls).as_py() == len(self):
            return None
        counts = pc.value_counts(urls)
        return str(counts.field("values").filter(pc.greater(counts.field("counts"), 1))[0])

    def lookup(self) -> Mapping[str, SourceInfo]:
        """URL -> identity, made on its first use (the write of a cube makes none)."""
        return _ByUrl(self)

    def __len__(self) -> int:
        return self._table.num_rows

    @overload
    def __getitem__(self, index: int) -> SourceInfo: ...

    @overload
    def __getitem__(self, index: slice) -> MemberTable: ...

    def __getitem__(self, index: int | slice) -> SourceInfo | MemberTable:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return MemberTable.of(list(self)[index])
            return MemberTable(self._table.slice(start, max(stop - start, 0)))
        if not -n <= index < n:
            raise IndexError("member index out of range")
        return self._objects(index % n, 1)[0]

    def _objects(self, start: int, length: int) -> list[SourceInfo]:
        return [SourceInfo(**row) for row in self._table.slice(start, length).to_pylist()]

    def __iter__(self) -> Iterator[SourceInfo]:
        for start in range(0, len(self), _SLICE):
            yield from self._objects(start, _SLICE)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MemberTable):
            return self._table.equals(other._table)
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other,
                                                                         strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MemberTable({len(self)} members)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (MemberTable, (self._table,))


class _ByUrl(Mapping[str, SourceInfo]):
    """:meth:`MemberTable.lookup`: the dict made on the first lookup."""

    __slots__ = ("_dict", "_members")

    def __init__(self, members: MemberTable) -> None:
        self._members = members
        self._dict: dict[str, SourceInfo] | None = None

    def _made(self) -> dict[str, SourceInfo]:
        if self._dict is None:
            self._dict = {m.url: m for m in self._members}
        return self._dict

    def __getitem__(self, url: str) -> SourceInfo:
        return self._made()[url]

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._members)
