"""A datacube's member identities as columns (:class:`MemberTable`), not one object each.

A :class:`~h5sidecar.references.SourceInfo` and its field values are ~470 bytes of Python
objects; a cube of a million members held them all from the first batch of its build to its
write.  A :class:`MemberTable` holds the same fields as Arrow columns (~120 bytes a member) and
is a read-only sequence of :class:`SourceInfo`, each made when asked for: a cube's references
(:attr:`~h5sidecar.references.GranuleRefs.members`) may hold one instead of a tuple, and every
reader of the members sees the same identities.

A table may carry more columns than the identity (a cube's per-member record: its length
along the concat dimension, the sidecar it came from); they travel with it (sliced, joined,
written to a Parquet cube's members file) and are read with :meth:`MemberTable.column`.  A
table read from a cube's members file is *lazy*: its length and digest are known at once, its
rows are read when first needed (see :mod:`h5sidecar.references.parquet_sidecar._members_file`).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._source_info import SourceInfo
from h5sidecar.references.datacube._url_column import repeated_url

__all__ = [
    "DIGEST_ROWS",
    "MemberTable",
    "Pieces",
    "combine_digests",
    "first_rows",
    "positions",
    "ranges",
]

#: The columns, in :class:`SourceInfo`'s field order.
_SCHEMA = pa.schema([
    ("url", pa.string()), ("size", pa.int64()), ("etag", pa.string()), ("mtime", pa.float64()),
    ("mtime_ns", pa.int64()), ("inode", pa.int64()), ("ctime_ns", pa.int64()),
    ("device", pa.int64()),
])  # fmt: skip
_FIELDS = tuple(_SCHEMA.names)
#: Members made into objects at a time by iteration.
_SLICE = 10_000
#: Members a part digest covers (:meth:`MemberTable.part_digests`); a Parquet cube's members
#: files hold as many each.
DIGEST_ROWS = 100_000


def _repeated(urls: pa.ChunkedArray) -> str | None:
    """A URL listed twice in ``urls`` or None: without joining the chunks when each is in
    increasing order and so are their ends (members files of a cube in order), else
    :func:`~h5sidecar.references.datacube._url_column.repeated_url` of them joined."""
    chunks = [c for c in urls.chunks if len(c)]
    ordered = all(len(c) < 2 or pc.all(pc.less(c.slice(0, len(c) - 1), c.slice(1))).as_py()
                  for c in chunks)
    if ordered and all(a[len(a) - 1].as_py() < b[0].as_py()
                       for a, b in itertools.pairwise(chunks)):
        return None
    return repeated_url(urls.combine_chunks() if urls.num_chunks != 1 else urls.chunk(0))


def first_rows(column: pa.Array | pa.ChunkedArray, wanted: pa.Array) -> np.ndarray:
    """The first row of ``column`` equal to each of ``wanted`` (-1: none; a null matches
    nothing), as ``pc.index_in(wanted, value_set=column)`` gives.

    The hash table is of ``wanted`` (an append's few sidecars or URLs), not of ``column``
    (every member's: ~130 MB at a million members), and ``column``'s chunks (one a members
    file) are not joined; then only the rows that matched are hashed.
    """
    out = np.full(len(wanted), -1, np.int64)
    if not len(wanted) or not len(column):
        return out
    hit = pc.is_in(column, value_set=wanted, skip_nulls=True)
    rows = np.flatnonzero(hit.to_numpy(zero_copy_only=False))  # (is_in gives no null)
    if not rows.size:
        return out
    matched = column.take(pa.array(rows))
    if isinstance(matched, pa.ChunkedArray):
        matched = matched.combine_chunks()
    at = pc.index_in(wanted, value_set=matched, skip_nulls=True)  # first occurrence
    found = at.is_valid().to_numpy(zero_copy_only=False)
    out[found] = rows[at.fill_null(0).to_numpy(zero_copy_only=False)[found]]
    return out


def positions(values: pa.Array, order: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The first row of ``order`` equal to each of ``values`` (-1: none), with no Python
    object a value.

    ``values`` is usually a cube's chunk URL dictionary, which begins with its members' URLs in
    order (``order``): that prefix is compared as a whole (a memory compare), and only the
    values after it, or all of them when it differs, are looked up (:func:`first_rows`).
    """
    n = len(order)
    out = np.full(len(values), -1, np.int64)
    head = min(n, len(values))
    if head and pa.chunked_array([values.slice(0, head)], order.type).equals(
            order if head == n else order.slice(0, head)):
        out[:head] = np.arange(head)
        if head < len(values):
            out[head:] = first_rows(order, values.slice(head))
        return out
    return first_rows(order, values)


def ranges(table: pa.Table) -> dict[str, list[str] | None]:
    """The least and greatest value of each string column of ``table`` (None: every value
    null): what a members file's entry records, so a lookup skips the files it rules out."""
    out: dict[str, list[str] | None] = {}
    for f in table.schema:
        if pa.types.is_string(f.type):
            span = pc.min_max(table.column(f.name))
            lo, hi = span["min"].as_py(), span["max"].as_py()
            out[f.name] = None if lo is None else [lo, hi]
    return out


class Pieces(Protocol):
    """A lazy table's rows in consecutive files (a cube's members files): each file's row
    count and recorded :func:`ranges` (None: not recorded), a file's rows read and checked
    alone, and every file's rows joined and checked together."""

    counts: tuple[int, ...]
    spans: tuple[Mapping[str, Any] | None, ...]

    def read(self, k: int) -> pa.Table: ...

    def read_column(self, k: int, name: str) -> pa.ChunkedArray | None: ...

    def join(self, tables: list[pa.Table]) -> pa.Table: ...


def _may_hold(span: Mapping[str, Any] | None, name: str, wanted: pa.Array) -> bool:
    """Whether a file whose recorded ranges are ``span`` may hold a value of ``wanted`` in
    column ``name`` (no range recorded: it may)."""
    if span is None or name not in span:
        return True
    bounds = span[name]
    if bounds is None:  # every value null: a null matches nothing
        return False
    lo, hi = (pa.scalar(b, pa.string()) for b in bounds)
    inside = pc.and_(pc.greater_equal(wanted, lo), pc.less_equal(wanted, hi))
    return bool(pc.any(inside).as_py())


def combine_digests(parts: Sequence[str]) -> str:
    """The digest of a table from its parts' (:meth:`MemberTable.part_digests`): a table of
    one part has that part's digest, so tables of up to :data:`DIGEST_ROWS` members keep the
    digest they always had."""
    if len(parts) == 1:
        return parts[0]
    return hashlib.blake2b("\n".join(parts).encode(), digest_size=16).hexdigest()


class MemberTable(Sequence[SourceInfo]):
    """Source identities in columns; a read-only sequence of :class:`SourceInfo`."""

    __slots__ = ("_by_url", "_columns", "_count", "_digest", "_load", "_loaded", "_lock",
                 "_pieces", "_read", "_sorted", "_unique")

    def __init__(self, table: pa.Table) -> None:
        self._loaded: pa.Table | None = table
        self._count = table.num_rows
        self._digest: str | None = None
        self._load: Callable[[], pa.Table] | None = None
        self._lock = threading.Lock()
        self._by_url: _ByUrl | None = None
        # the URL column and its row numbers in URL order (:meth:`row_of`)
        self._sorted: tuple[pa.ChunkedArray, np.ndarray] | None = None
        self._unique = False  # its URLs were found unique (:meth:`duplicate_url`)
        self._pieces: Pieces | None = None
        self._read: dict[int, pa.Table] = {}
        # of a lazy table in files: columns read alone (:meth:`column_only`), by name
        self._columns: dict[str, pa.ChunkedArray | None] = {}

    @classmethod
    def lazy(cls, count: int, digest: str, load: Callable[[], pa.Table],
             pieces: Pieces | None = None) -> MemberTable:
        """A table of ``count`` members whose rows ``load()`` reads when first needed;
        ``digest`` is what :meth:`digest` of the loaded rows gives (recorded by the writer).
        ``pieces``: the same rows in files (their counts adding up to ``count``), read one at
        a time by the lookups that can (see the module docstring)."""
        out = cls.__new__(cls)
        out._loaded, out._count, out._digest, out._load = None, count, digest, load
        out._lock, out._by_url, out._sorted = threading.Lock(), None, None
        out._unique, out._read, out._columns = False, {}, {}
        out._pieces = pieces if pieces is not None and len(pieces.counts) > 1 else None
        return out

    @property
    def table(self) -> pa.Table:
        """Every column (identity first), loaded now if lazy."""
        if self._loaded is None:
            with self._lock:
                if self._loaded is None:
                    if self._pieces is not None and self._read:  # (those read: not again)
                        src = self._pieces
                        self._loaded = src.join([
                            self._read[k] if k in self._read else src.read(k)
                            for k in range(len(src.counts))])
                    else:
                        assert self._load is not None
                        self._loaded = self._load()
                    self._read = {}
                    self._loaded = self._sharing_columns(self._loaded)
        return self._loaded

    def _sharing_columns(self, table: pa.Table) -> pa.Table:
        """``table`` with the columns read alone before (:meth:`column_only`) in place of
        their second copy, which is dropped (a cube's URLs: ~70 MB at a million members)."""
        for name, column in self._columns.items():
            i = table.schema.get_field_index(name)
            if column is not None and i >= 0 and column.type == table.schema.field(i).type:
                table = table.set_column(i, table.schema.field(i), column)
        self._columns = {}
        return table

    def _piece(self, k: int) -> pa.Table:
        """File ``k``'s rows (read once)."""
        assert self._pieces is not None
        with self._lock:
            if k not in self._read:
                table = self._pieces.read(k)
                if self._read and table.schema != next(iter(self._read.values())).schema:
                    raise InvalidReferenceError(
                        "the members files' columns differ; build the cube again")
                self._read[k] = table
            return self._read[k]

    @property
    def _by_piece(self) -> bool:
        """Whether lookups read the files one at a time (lazy, in files, none loaded whole)."""
        return self._loaded is None and self._pieces is not None

    def _offsets(self) -> np.ndarray:
        assert self._pieces is not None
        return np.concatenate([[0], np.cumsum(self._pieces.counts)]).astype(np.int64)

    @property
    def schema(self) -> pa.Schema:
        """The columns' names and types (of a lazy table in files: its last file's, read)."""
        if self._by_piece:
            assert self._pieces is not None
            return self._piece(len(self._pieces.counts) - 1).schema
        return self.table.schema

    def _slice(self, start: int, length: int) -> pa.Table:
        """Rows ``start`` to ``start + length`` (fewer at the end); a lazy table in files reads
        only the files holding them."""
        if not self._by_piece:
            return self._table.slice(start, length)
        starts = self._offsets()
        stop = min(start + length, len(self))
        parts = [self._piece(k).slice(max(start - a, 0), max(min(stop, b) - max(start, a), 0))
                 for k, (a, b) in enumerate(itertools.pairwise(starts.tolist()))
                 if a < stop and b > start]
        return pa.concat_tables(parts) if parts else self.schema.empty_table()

    def rows_of(self, name: str, wanted: pa.Array) -> np.ndarray:
        """The first row whose column ``name`` equals each of ``wanted`` (-1: none), as
        :func:`first_rows` over the whole column gives; a lazy table in files reads only the
        files whose recorded range of ``name`` holds one of ``wanted`` (more values than a
        file's rows: the whole column, one hash table of them rather than one a file)."""
        if not self._by_piece or (self._pieces is not None
                                  and len(wanted) > max(self._pieces.counts)):
            return first_rows(self.table.column(name), wanted)
        assert self._pieces is not None
        out = np.full(len(wanted), -1, np.int64)
        starts = self._offsets()
        for k, span in enumerate(self._pieces.spans):
            if (out >= 0).all() or not _may_hold(span, name, wanted):
                continue
            rows = first_rows(self._piece(k).column(name), wanted)
            new = (out < 0) & (rows >= 0)
            out[new] = rows[new] + starts[k]
        return out

    def take(self, rows: np.ndarray, names: Sequence[str]) -> pa.Table:
        """Columns ``names`` of ``rows`` (in that order); a lazy table in files reads only the
        files holding them."""
        rows = np.asarray(rows, np.int64)
        if not self._by_piece:
            return self.table.select(list(names)).take(pa.array(rows, pa.int64()))
        starts = self._offsets()
        which = np.searchsorted(starts, rows, side="right") - 1
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError("member row out of range")
        order = np.argsort(which, kind="stable")
        parts = []
        for k in np.unique(which):
            at = rows[which == k] - starts[k]
            parts.append(self._piece(int(k)).select(list(names)).take(pa.array(at, pa.int64())))
        if not parts:
            return self.schema.empty_table().select(list(names))
        joined = pa.concat_tables(parts)  # grouped by file: put back in the order asked
        return joined.take(pa.array(np.argsort(order, kind="stable"), pa.int64()))

    @property
    def _table(self) -> pa.Table:
        return self.table

    @property
    def is_loaded(self) -> bool:
        """False while a lazy table's rows are not read yet."""
        return self._loaded is not None

    @staticmethod
    def check_columns(table: pa.Table, where: str) -> None:
        """Refuse a table without the identity columns, or with a URL listed twice."""
        have = {f.name: f.type for f in table.schema}
        bad = [f.name for f in _SCHEMA if have.get(f.name) != f.type]
        if bad:
            raise InvalidReferenceError(
                f"{where} lacks the member column(s) {', '.join(bad)} (or has another type); "
                "build the cube again")
        urls = table.column("url")
        # by order, not by a hash of every URL (~170 MB at a million members)
        if urls.null_count or _repeated(urls) is not None:
            raise InvalidReferenceError(f"{where} lists a member URL twice or none")

    def column(self, name: str) -> pa.ChunkedArray | None:
        """A per-member column beside the identity (None when the table has none)."""
        table = self.table
        return table.column(name) if name in table.column_names else None

    def column_only(self, name: str) -> pa.ChunkedArray | None:
        """:meth:`column`, of a lazy table in files not loaded: only that column of each file
        decoded (each member's length of a million: 8 MB, not every column's ~300 MB)."""
        if not self._by_piece:
            return self.column(name)
        assert self._pieces is not None
        with self._lock:
            if name in self._columns:
                return self._columns[name]
        columns = [self._read[k].column(name) if k in self._read and name in
                   self._read[k].column_names else self._pieces.read_column(k, name)
                   for k in range(len(self._pieces.counts))]
        out = None if any(c is None for c in columns) else pa.chunked_array(
            [c for col in columns if col is not None for c in col.chunks],
            columns[0].type if columns[0] is not None else None)
        with self._lock:
            return self._columns.setdefault(name, out)

    def with_columns(self, columns: Mapping[str, pa.Array | pa.ChunkedArray]) -> MemberTable:
        """This table with per-member ``columns`` added (or replaced)."""
        table = self.table
        for name, values in columns.items():
            if name in _FIELDS:
                raise ValueError(f"{name!r} is an identity column")
            if len(values) != table.num_rows:
                raise ValueError(f"{len(values)} values of {name!r} for {table.num_rows} members")
            if name in table.column_names:
                table = table.drop_columns([name])
            table = table.append_column(name, values)
        out = MemberTable(table)
        out._unique = self._unique  # the same identities
        return out

    def digest(self) -> str:
        """A digest of every member's identity (recorded by a lazy table's writer): equal
        tables, equal digests; any member's identity changed, another digest.

        Taken per :data:`DIGEST_ROWS` members (:meth:`part_digests`), the parts' digests
        then combined (:func:`combine_digests`): an append that rewrites only a cube's last
        part of members digests only that part and what is new.
        """
        if self._digest is None:
            self._digest = combine_digests(self.part_digests())
        return self._digest

    def part_digests(self, start: int = 0) -> list[str]:
        """The digest of each :data:`DIGEST_ROWS` members from row ``start`` (a multiple of
        it) on; one digest (of no member) for an empty table."""
        if start % DIGEST_ROWS:
            raise ValueError(f"start {start} is not a multiple of {DIGEST_ROWS}")
        out = []
        for a in range(start, max(len(self), start + 1), DIGEST_ROWS):
            h = hashlib.blake2b(digest_size=16)
            for b in range(a, min(a + DIGEST_ROWS, len(self)), _SLICE):
                for m in self._objects(b, min(_SLICE, a + DIGEST_ROWS - b)):
                    h.update("|".join(map(str, m.key)).encode("utf-8", "surrogatepass") + b"\0")
            out.append(h.hexdigest())
        return out

    @classmethod
    def of(cls, members: Iterable[SourceInfo]) -> MemberTable:
        """The table of ``members`` (in order)."""
        rows = list(members)
        return cls(pa.Table.from_pydict(
            {f.name: [getattr(m, f.name) for m in rows] for f in _SCHEMA}, schema=_SCHEMA))

    @classmethod
    def concat(cls, parts: Sequence[MemberTable]) -> MemberTable:
        """The members of ``parts``, one after the other: their columns chunked, not copied
        (joined, a build's members were held twice at its write; writers join a row group
        at a time)."""
        if not parts:
            return cls.of(())
        # identity columns only unless every part has the same per-member columns
        tables = [p.table for p in parts]
        if len({tuple(t.column_names) for t in tables}) > 1:
            tables = [t.select(list(_FIELDS)) for t in tables]
        return cls(pa.concat_tables(tables))

    def sharing_urls(self, urls: pa.Array) -> MemberTable:
        """This table with ``urls`` as its URL column when they are its URLs, else itself: a
        build's members and its URL table then hold every URL once, not twice."""
        table = self.table
        if len(urls) != table.num_rows or not table.column("url").equals(
                pa.chunked_array([urls], pa.string())):
            return self
        at = table.column_names.index("url")
        out = MemberTable(table.set_column(at, "url", pa.chunked_array([urls], pa.string())))
        out._unique = self._unique
        return out

    @property
    def urls(self) -> pa.ChunkedArray:
        """Every member's URL."""
        return self._table.column("url")

    def checked_urls(self) -> pa.ChunkedArray:
        """Every member's URL, each listed once (refused otherwise, as a whole read checks);
        of a lazy table in files not read whole, that column alone of each file: what a
        cube's manifests name (at a million members ~70 MB, where every column is ~260 MB)."""
        if not self._by_piece:
            return self.urls
        urls = self.column_only("url")
        if urls is None or urls.type != pa.string() or urls.null_count or (
                not self._unique and _repeated(urls) is not None):
            raise InvalidReferenceError(
                "the cube's members files list a member URL twice or none (or have no URL "
                "column): build the cube again")
        self._unique = True
        return urls

    def duplicate_url(self) -> str | None:
        """A URL listed more than once, or None (each URL must be one member).

        Found by sorting, and not even that when the URLs are in order
        (:func:`~h5sidecar.references.datacube._url_column.repeated_url`).  The answer None
        is kept (a table is immutable): a build checks its members once.
        """
        if self._unique:
            return None
        urls = self.urls
        twice = repeated_url(urls.chunk(0) if urls.num_chunks == 1 else urls.combine_chunks())
        self._unique = twice is None
        return twice

    def row_of(self, url: str) -> int | None:
        """The row of the member recorded at ``url`` (exactly as recorded), or None.

        The first call reads a lazy table's URL column (that column alone of a table in
        files: :meth:`checked_urls`) and sorts it (the row numbers in URL order: 8 bytes a
        member, ~0.15 s at a million); each call is then a binary search
        that makes ~20 strings.  No :class:`SourceInfo` is made, nor a string a member (a
        ``str -> row`` dict of a million members held ~200 MB), so a reader that checks a few
        members' URLs pays for no other member's.
        """
        if self._sorted is None:  # (the column's chunks are not joined: one copy of it)
            urls = self.checked_urls()
            self._sorted = urls, pc.sort_indices(urls).to_numpy()
        column, order = self._sorted
        lo, hi = 0, len(order)
        while lo < hi:  # the first row in URL order not before ``url`` (bytes order is str's)
            mid = (lo + hi) // 2
            if column[int(order[mid])].as_py() < url:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(order) and column[int(order[lo])].as_py() == url:
            return int(order[lo])
        return None

    def lookup(self) -> Mapping[str, SourceInfo]:
        """URL -> identity, each made when first looked up (the write of a cube makes none);
        one mapping per table, so every reader of a cube's identities shares its objects."""
        if self._by_url is None:
            self._by_url = _ByUrl(self)
        return self._by_url

    def __len__(self) -> int:
        return self._count

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
        part = self._slice(start, length)
        # column lists zipped into positional arguments (the schema is SourceInfo's field
        # order): ~2x faster than a dict a row
        return [SourceInfo(*row) for row in zip(*(part.column(f).to_pylist() for f in _FIELDS),
                                                 strict=True)]

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
        if self._loaded is None:  # a lazy table travels as its loader (a Dask worker reads it)
            return (MemberTable.lazy, (self._count, self._digest, self._load, self._pieces))
        return (MemberTable, (self._loaded,))


class _ByUrl(Mapping[str, SourceInfo]):
    """:meth:`MemberTable.lookup`: a member's identity made when first looked up (a reader's
    chunk-cache keys ask for the members it reads, not for every member)."""

    __slots__ = ("_made", "_members")

    def __init__(self, members: MemberTable) -> None:
        self._members = members
        self._made: dict[int, SourceInfo] = {}

    def __getitem__(self, url: str) -> SourceInfo:
        row = self._members.row_of(url) if isinstance(url, str) else None
        if row is None:
            raise KeyError(url)
        info = self._made.get(row)
        if info is None:
            info = self._made[row] = self._members[row]
        return info

    def __iter__(self) -> Iterator[str]:
        return iter(self._members.urls.to_pylist())

    def __len__(self) -> int:
        return len(self._members)
