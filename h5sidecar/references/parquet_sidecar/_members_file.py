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
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references.datacube._member_table import MemberTable

__all__ = ["MEMBERS_FILE", "MEMBERS_KEY", "encode_members", "lazy_members", "members_entry"]

MEMBERS_FILE = ".h5sidecar/members.parq"
#: Key of the extras entry describing the members file.
MEMBERS_KEY = "members_file"
#: Members a row group holds (a reader of a few could read one group; zstd works per page).
_ROW_GROUP = 100_000


def encode_members(members: MemberTable) -> tuple[bytes, dict[str, Any]]:
    """The bytes of :data:`MEMBERS_FILE` and its extras entry (``count``, ``bytes``,
    ``digest``)."""
    sink = io.BytesIO()
    table = members.table
    with pq.ParquetWriter(sink, table.schema, compression="zstd", store_schema=False) as out:
        # a row group at a time, each joined into one chunk first: the file a whole table
        # joined gives (pages follow chunks), without the table joined whole
        for start in range(0, max(table.num_rows, 1), _ROW_GROUP):
            out.write_table(table.slice(start, _ROW_GROUP).combine_chunks(), _ROW_GROUP)
    data = sink.getvalue()
    return data, {"file": MEMBERS_FILE, "count": len(members), "bytes": len(data),
                  "digest": members.digest()}


def members_entry(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """The members-file entry of an extras block, checked, or None when it has none."""
    entry = block.get(MEMBERS_KEY)
    if entry is None:
        return None
    if (not isinstance(entry, dict) or entry.get("file") != MEMBERS_FILE
            or not _count(entry.get("count")) or not _count(entry.get("bytes"))
            or not isinstance(entry.get("digest"), str)):
        raise InvalidReferenceError(
            f"malformed {MEMBERS_KEY} entry {entry!r} in the extras; build the cube again")
    return entry


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def lazy_members(
    entry: Mapping[str, Any], fetch: Callable[[list[str]], Mapping[str, bytes | None]]
) -> MemberTable:
    """A :class:`MemberTable` of ``entry["count"]`` members read from :data:`MEMBERS_FILE`
    through ``fetch`` when first needed (checked then: its size, count, URLs unique)."""
    count, size = int(entry["count"]), int(entry["bytes"])
    return MemberTable.lazy(count, str(entry["digest"]), _Loader(fetch, count, size))


class _Loader:
    """Reads and checks the members file (picklable when ``fetch`` is)."""

    __slots__ = ("count", "fetch", "size")

    def __init__(self, fetch: Callable[[list[str]], Mapping[str, bytes | None]], count: int,
                 size: int) -> None:
        self.fetch, self.count, self.size = fetch, count, size

    def __call__(self) -> pa.Table:
        data = self.fetch([MEMBERS_FILE]).get(MEMBERS_FILE)
        if data is None or len(data) != self.size:
            raise InvalidReferenceError(
                f"{MEMBERS_FILE} is missing or not the one .zmetadata lists "
                f"({'absent' if data is None else f'{len(data)} bytes, not {self.size}'}); "
                "the cube was damaged or rewritten while read: open it again or rebuild it")
        try:
            # one thread, no pyarrow.dataset (read_table's): ~50 MB less resident, and the
            # file's row groups are decoded in turn (an append to a cube of 100,000 members:
            # 119 MB instead of 178)
            table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
        except (pa.ArrowException, OSError) as exc:
            raise InvalidReferenceError(
                f"{MEMBERS_FILE} is unreadable ({exc}); build the cube again") from exc
        MemberTable.check_columns(table, MEMBERS_FILE)
        if table.num_rows != self.count:
            raise InvalidReferenceError(
                f"{MEMBERS_FILE} holds {table.num_rows} members, .zmetadata {self.count}; "
                "build the cube again")
        return table

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Loader, (self.fetch, self.count, self.size))
