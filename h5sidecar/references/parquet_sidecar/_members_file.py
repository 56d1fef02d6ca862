"""A Parquet cube's members in their own file, read when first needed: ``.h5sidecar/members.parq``.

Version 2 extras pack a cube's member identities (and each array's member URL indices) into
``.zmetadata``: opening a cube parsed a JSON object per member and made a
:class:`~h5sidecar.references.SourceInfo` of each (1.9 s of a 2.5 s open at 100,000 members),
and writing one turned every member into JSON first.  A Parquet cube now writes its
:class:`~h5sidecar.references.MemberTable` as one Parquet file (the identity columns, plus any
per-member columns the cube's writer added, e.g. its length along the concat dimension), and
its ``.zmetadata`` only counts them::

    "h5sidecar": {"version": 2, ..., "members_file": {"file": ".h5sidecar/members.parq",
                  "count": N, "bytes": B, "digest": "<blake2b of the identities>"}}

An array whose chunk URLs are exactly the members' URLs, in order (every array of a cube whose
granules each hold a chunk of it) says ``"urls": "members"`` instead of N indices.  Opening the
cube reads neither the file nor any per-member value: the members are a lazy
:class:`~h5sidecar.references.MemberTable` of known length and digest, loaded (one GET) on the
first use of an identity or a URL (a chunk read's allow-list and freshness guard, the check of
a manifest's chunks against their members' sizes, a manifest's URLs).  Readers of
version 2 without the file (cubes written before) read them packed, as before.

A cube of more than :func:`part_rows` members holds them in several files of that many each
(the last one partial): ``members.parq``, then ``members.1.parq``, ``members.2.parq``, ...,
each counted in the entry's ``parts`` with its bytes and the digest of its members (the
cube's digest combines them: :func:`~h5sidecar.references.datacube._member_table.combine_digests`)::

    "members_file": {"file": ".h5sidecar/members.parq", "count": N, "bytes": B, "digest": D,
                     "parts": [{"count": 100000, "bytes": b0, "digest": d0,
                                "ranges": {"url": [lo, hi], "sidecar": [lo, hi], ...}}, ...]}

An append to a cube (:func:`~h5sidecar.references.write_parquet_tail`) then rewrites its last
file and adds new ones (:func:`encode_member_parts`), and digests only those members: the
other files are kept as they are.  A reader of every member loads every file in one fetch; a
lookup of a few members (an append's: is this granule a member, is this sidecar a member's)
reads only the files whose ``ranges`` (each string column's least and greatest value, checked
when the file is read) may hold them.  An h5sidecar older than this format finds the entry's
bytes wrong and says to rebuild.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references.datacube import _member_table
from h5sidecar.references.datacube._member_table import MemberTable, combine_digests, ranges

__all__ = [
    "MEMBERS_FILE",
    "MEMBERS_KEY",
        "encode_member_parts",
    "encode_members",
    "is_member_file",
    "lazy_members",
    "member_file",
    "member_parts",
    "members_entry",
    "part_rows",
    "parts_entry",
]

MEMBERS_FILE = ".h5sidecar/members.parq"
#: The members files after the first.
_MORE = re.compile(r"\.h5sidecar/members\.\d+\.parq")
#: Key of the extras entry describing the members file.
MEMBERS_KEY = "members_file"
#: Members a row group holds (a reader of a few could read one group; zstd works per page).
_ROW_GROUP = 100_000


def part_rows() -> int:
    """Members a file holds (the last file fewer): a part of the cube's digest each
    (:data:`~h5sidecar.references.datacube._member_table.DIGEST_ROWS`, read when called)."""
    return _member_table.DIGEST_ROWS


def is_member_file(rel: str) -> bool:
    """Whether ``rel`` names one of a cube's members files."""
    return rel == MEMBERS_FILE or _MORE.fullmatch(rel) is not None


def member_file(k: int) -> str:
    """The ``k``-th members file's path in the cube (the first is :data:`MEMBERS_FILE`)."""
    return MEMBERS_FILE if k == 0 else f".h5sidecar/members.{k}.parq"


def encode_members(members: MemberTable) -> tuple[list[tuple[str, bytes]], dict[str, Any]]:
    """The members files (path, bytes) and their extras entry (``count``, ``bytes``,
    ``digest``, and ``parts`` when there are several files)."""
    files, parts = encode_member_parts(members, 0)
    return files, parts_entry(parts)


def encode_member_parts(members: MemberTable, first: int
                        ) -> tuple[list[tuple[str, bytes]], list[dict[str, Any]]]:
    """``members`` as the members files ``first``, ``first + 1``, ... (:func:`part_rows`
    each, the last fewer), and each file's ``{count, bytes, digest}``."""
    digests = members.part_digests()
    files, parts = [], []
    table, size = members.table, part_rows()
    for k, start in enumerate(range(0, max(table.num_rows, 1), size)):
        rows = table.slice(start, size)
        data = _encode(rows)
        files.append((member_file(first + k), data))
        parts.append({"count": rows.num_rows, "bytes": len(data), "digest": digests[k],
                      "ranges": ranges(rows)})
    return files, parts


def _encode(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, table.schema, compression="zstd", store_schema=False) as out:
        # a row group at a time, each joined into one chunk first: the file a whole table
        # joined gives (pages follow chunks), without the table joined whole
        for start in range(0, max(table.num_rows, 1), _ROW_GROUP):
            out.write_table(table.slice(start, _ROW_GROUP).combine_chunks(), _ROW_GROUP)
    return sink.getvalue()


def parts_entry(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The extras entry of the members files ``parts`` (:func:`encode_member_parts`)."""
    entry = {"file": MEMBERS_FILE, "count": sum(p["count"] for p in parts),
             "bytes": sum(p["bytes"] for p in parts),
             "digest": combine_digests([p["digest"] for p in parts])}
    if len(parts) > 1:  # (one file: read whole by any lookup, its ranges not needed)
        entry["parts"] = [dict(p) for p in parts]
    return entry


def member_parts(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each members file's ``{count, bytes, digest}`` of a checked entry (one file: the
    entry's own; a file written before parts may hold more than :func:`part_rows`)."""
    if "parts" in entry:
        return [dict(p) for p in entry["parts"]]
    return [{"count": entry["count"], "bytes": entry["bytes"], "digest": entry["digest"]}]


def members_entry(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """The members-file entry of an extras block, checked, or None when it has none."""
    entry = block.get(MEMBERS_KEY)
    if entry is None:
        return None
    if (not isinstance(entry, dict) or entry.get("file") != MEMBERS_FILE
            or not _count(entry.get("count")) or not _count(entry.get("bytes"))
            or not isinstance(entry.get("digest"), str) or not _parts_ok(entry)):
        raise InvalidReferenceError(
            f"malformed {MEMBERS_KEY} entry {str(entry)[:300]} in the extras; build the cube "
            "again")
    return entry


def _parts_ok(entry: Mapping[str, Any]) -> bool:
    """Whether ``entry``'s ``parts`` (when it has them) are files of one number of members
    but the last (fewer), adding up to its count and bytes, its digest their combination."""
    parts = entry.get("parts")
    if parts is None:
        return True
    if (not isinstance(parts, list) or len(parts) < 2
            or not all(isinstance(p, dict) and _count(p.get("count"))
                       and _count(p.get("bytes")) and isinstance(p.get("digest"), str)
                       for p in parts)):
        return False
    if not all(_ranges_ok(p.get("ranges")) for p in parts):
        return False
    counts = [p["count"] for p in parts]
    return (all(c == counts[0] for c in counts[:-1]) and counts[-1] <= counts[0]
            and sum(counts) == entry["count"]
            and sum(p["bytes"] for p in parts) == entry["bytes"]
            and combine_digests([p["digest"] for p in parts]) == entry["digest"])


def _ranges_ok(value: Any) -> bool:
    """Whether a part's ``ranges`` are absent (written before them) or column -> ``[lo, hi]``
    (strings, lo <= hi) or null."""
    if value is None:
        return True
    return isinstance(value, dict) and all(
        isinstance(k, str) and (v is None or (
            isinstance(v, list) and len(v) == 2 and all(isinstance(b, str) for b in v)
            and v[0] <= v[1]))
        for k, v in value.items())


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def lazy_members(
    entry: Mapping[str, Any], fetch: Callable[[list[str]], Mapping[str, bytes | None]]
) -> MemberTable:
    """A :class:`MemberTable` of ``entry["count"]`` members read from the members files
    through ``fetch`` when first needed (checked then: their sizes, count, URLs unique)."""
    parts = member_parts(entry)
    loader = _Loader(fetch, int(entry["count"]), tuple(int(p["bytes"]) for p in parts),
                     tuple(int(p["count"]) for p in parts),
                     tuple(p.get("ranges") for p in parts))
    return MemberTable.lazy(int(entry["count"]), str(entry["digest"]), loader, pieces=loader)


class _Loader:
    """Reads and checks the members files, all at once or one at a time (picklable when
    ``fetch`` is); a :class:`~h5sidecar.references.datacube._member_table.Pieces`."""

    __slots__ = ("count", "counts", "fetch", "sizes", "spans")

    def __init__(self, fetch: Callable[[list[str]], Mapping[str, bytes | None]], count: int,
                 sizes: int | tuple[int, ...], counts: tuple[int, ...] | None = None,
                 spans: tuple[Mapping[str, Any] | None, ...] | None = None) -> None:
        self.fetch, self.count = fetch, count
        self.sizes = (sizes,) if isinstance(sizes, int) else tuple(sizes)
        self.counts = (count,) if counts is None else tuple(counts)
        self.spans = spans if spans is not None else (None,) * len(self.sizes)

    def __call__(self) -> pa.Table:
        names = [member_file(k) for k in range(len(self.sizes))]
        blobs = self.fetch(names)  # one call: concurrent GETs on an object store
        tables = [self._spans_checked(k, self._parse(k, blobs.get(name)))
                  for k, name in enumerate(names)]
        del blobs
        return self.join(tables)

    def read(self, k: int) -> pa.Table:
        """Members file ``k``'s rows, checked alone (its size, count, columns, recorded
        ranges, and URLs unique within it)."""
        name = member_file(k)
        table = self._parse(k, self.fetch([name]).get(name))
        MemberTable.check_columns(table, name)
        if table.num_rows != self.counts[k]:
            raise InvalidReferenceError(
                f"{name} holds {table.num_rows} members, .zmetadata {self.counts[k]}; "
                "build the cube again")
        return self._spans_checked(k, table)

    def read_column(self, k: int, name: str) -> pa.ChunkedArray | None:
        """Column ``name`` of members file ``k`` alone (None: the file has none), its size and
        count checked (its other columns not decoded)."""
        file = member_file(k)
        data = self._checked_bytes(k, self.fetch([file]).get(file))
        try:
            f = pq.ParquetFile(pa.BufferReader(data))
            if name not in f.schema_arrow.names:
                return None
            column = f.read(columns=[name], use_threads=False).column(name)
        except (pa.ArrowException, OSError) as exc:
            raise InvalidReferenceError(
                f"{file} is unreadable ({exc}); build the cube again") from exc
        if len(column) != self.counts[k]:
            raise InvalidReferenceError(
                f"{file} holds {len(column)} members, .zmetadata {self.counts[k]}; "
                "build the cube again")
        return column

    def _spans_checked(self, k: int, table: pa.Table) -> pa.Table:
        """``table`` (file ``k``'s), refused unless its values span the recorded ranges."""
        span = self.spans[k]
        got = ranges(table) if span is not None else {}
        if span is not None and {c: span.get(c) for c in got} != got:
            raise InvalidReferenceError(
                f"{member_file(k)}'s values are not those whose ranges .zmetadata records; "
                "the cube was damaged: build it again")
        return table

    def _checked_bytes(self, k: int, data: bytes | None) -> bytes:
        name, size = member_file(k), self.sizes[k]
        if data is None or len(data) != size:
            raise InvalidReferenceError(
                f"{name} is missing or not the one .zmetadata lists "
                f"({'absent' if data is None else f'{len(data)} bytes, not {size}'}); "
                "the cube was damaged or rewritten while read: open it again or rebuild "
                "it")
        return data

    def _parse(self, k: int, data: bytes | None) -> pa.Table:
        name = member_file(k)
        data = self._checked_bytes(k, data)
        try:
            # one thread, no pyarrow.dataset (read_table's): ~50 MB less resident, and
            # the file's row groups are decoded in turn (an append to a cube of 100,000
            # members: 119 MB instead of 178)
            return pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
        except (pa.ArrowException, OSError) as exc:
            raise InvalidReferenceError(
                f"{name} is unreadable ({exc}); build the cube again") from exc

    def join(self, tables: list[pa.Table]) -> pa.Table:
        """Every file's rows as one table, checked together (the columns of every file
        alike, the URLs unique across them, the count .zmetadata's)."""
        where = MEMBERS_FILE if len(tables) == 1 else f"{MEMBERS_FILE} (and its parts)"
        if len({t.schema for t in tables}) > 1:
            raise InvalidReferenceError(
                f"{where}: the members files' columns differ; build the cube again")
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        MemberTable.check_columns(table, where)  # (a URL twice: in one file or in two)
        if table.num_rows != self.count:
            raise InvalidReferenceError(
                f"{where} holds {table.num_rows} members, .zmetadata {self.count}; "
                "build the cube again")
        return table

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Loader, (self.fetch, self.count, self.sizes, self.counts, self.spans))
