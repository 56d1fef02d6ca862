"""A cube's manifests file in parts, so that an append writes only its new rows.

A sidecar lists one manifests file (``"manifests": {"file": ".h5sidecar/manifests.parq",
"bytes": B}``).  An append to a local Parquet cube (:func:`~h5sidecar.references.write_parquet_tail`)
rewrote it whole: the old row groups copied, a million members' rows for one new day.  Instead
the append writes the new rows (the new chunks of each concatenated array, and the arrays it
gives whole, the inline coordinate) as a part of their own, and the entry lists the parts in
order::

    "manifests": {"parts": [
        {"file": ".h5sidecar/manifests.parq", "bytes": B0, "rows": R0, "whole": []},
        {"file": ".h5sidecar/manifests.3.parq", "bytes": B1, "rows": R1, "whole": ["time"]}]}

A reader reads every part and joins their rows in order; a part's ``whole`` arrays are given
whole by it, so their rows in the parts before it are dropped.  The parts are merged
size-tiered (:func:`merge_plan`: the last two while the one before is at most twice the
last), so a cube appended to day after day keeps a few parts (logarithmic in its appends) and
each row is rewritten a few times, not at every append.

The entry has no ``"file"``: an h5sidecar older than this layout finds no manifests file it
knows and reads the record files, which hold every chunk (a slower read, never another value).

A member replaced in place (its new granule the same length along the concat dimension: the
same chunk numbers) is written as a part marked ``"over": true``, whose rows supersede the
earlier parts' rows of the same ``(array, chunk)``; the record files holding those chunks are
written again too.  Such a cube's extras block is version 3
(:data:`~h5sidecar.references._extras_versions.OVER_VERSION`), which an h5sidecar before it
refuses ("upgrade h5sidecar") rather than read the replaced member's old chunks.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references.parquet_sidecar import _manifests_pieces
from h5sidecar.references.parquet_sidecar._manifests_file import (
    MANIFESTS_FILE,
    WRITE_OPTIONS,
)

__all__ = [
    "MAX_PARTS",
    "BulkPart",
    "bulk_parts",
    "encode_rows",
    "fetch_parts",
    "is_part",
    "merge_plan",
    "part_entry",
    "part_name",
    "read_part_rows",
]

#: A part's file after the first.
_PART = re.compile(r"\.h5sidecar/manifests\.(\d+)\.parq")
#: Most parts an entry may list (an allocation bound: the merges keep far fewer).
MAX_PARTS = 64


@dataclass(frozen=True)
class BulkPart:
    """One manifests file of a sidecar: its path, size, rows and the arrays it gives whole
    (their rows in earlier parts are superseded); ``over``: its rows supersede the earlier
    parts' rows of the same chunks (a member replaced in place, see the module docstring)."""

    file: str
    bytes: int
    rows: int
    whole: tuple[str, ...] = ()
    over: bool = False


def bulk_parts(entry: Any, where: str = ".zmetadata") -> list[BulkPart] | None:
    """The parts a ``"manifests"`` extras entry lists: one for a plain entry, the checked
    ``parts`` of a parted one (``InvalidReferenceError`` when malformed), None for none."""
    if not isinstance(entry, dict):
        return None
    if "parts" not in entry:
        size = entry.get("bytes")
        if entry.get("file") != MANIFESTS_FILE or not isinstance(size, int) or not _count(size):
            return None
        return [BulkPart(MANIFESTS_FILE, size, -1)]
    parts = entry["parts"]
    bad = f"{where}: malformed manifests parts {str(parts)[:300]}; re-create the sidecar"
    if not isinstance(parts, list) or not 1 <= len(parts) <= MAX_PARTS:
        raise InvalidReferenceError(bad)
    out = []
    for k, p in enumerate(parts):
        if (not isinstance(p, dict) or not isinstance(p.get("file"), str)
                or not _count(p.get("bytes")) or not _count(p.get("rows"))
                or not isinstance(p.get("whole"), list)
                or not all(isinstance(w, str) for w in p["whole"])
                or p.get("over", False) not in (True, False)):
            raise InvalidReferenceError(bad)
        if not (p["file"] == MANIFESTS_FILE if k == 0 else _PART.fullmatch(p["file"])):
            raise InvalidReferenceError(bad)
        if k == 0 and p.get("over"):  # (the first part has nothing before it to supersede)
            raise InvalidReferenceError(bad)
        out.append(BulkPart(p["file"], p["bytes"], p["rows"], tuple(p["whole"]),
                            bool(p.get("over", False))))
    if len({p.file for p in out}) != len(out):
        raise InvalidReferenceError(bad)
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def part_entry(parts: Sequence[BulkPart]) -> dict[str, Any]:
    """The ``"manifests"`` extras entry of ``parts`` (plain when one part gives nothing
    whole: what a whole write gives, and what readers before parts read)."""
    if len(parts) == 1 and not parts[0].whole and parts[0].file == MANIFESTS_FILE:
        return {"file": MANIFESTS_FILE, "bytes": parts[0].bytes}
    return {"parts": [{"file": p.file, "bytes": p.bytes, "rows": p.rows,
                       "whole": list(p.whole), **({"over": True} if p.over else {})}
                      for p in parts]}


def is_part(rel: str) -> bool:
    """Whether ``rel`` names a part after the first."""
    return _PART.fullmatch(rel) is not None


def part_name(parts: Sequence[BulkPart]) -> str:
    """A file name for a new part after ``parts`` (never one they use)."""
    numbers = [int(m.group(1)) for p in parts if (m := _PART.fullmatch(p.file))]
    return f".h5sidecar/manifests.{max(numbers, default=0) + 1}.parq"


def merge_plan(rows: Sequence[int]) -> int:
    """How many trailing parts of ``rows`` (each part's rows, the new one last) to merge
    into one (1: none): while the part before the merged ones holds at most twice their
    rows, it joins them."""
    n, merged = 1, rows[-1]
    while n < len(rows) and rows[-n - 1] <= 2 * merged:
        merged += rows[-n - 1]
        n += 1
    return n


def encode_rows(table: pa.Table) -> bytes:
    """A manifests file of ``table``'s rows (its dictionaries unified first), in row groups
    of :data:`~h5sidecar.references.parquet_sidecar._manifests_pieces.PIECE_ROWS`."""
    table = table.unify_dictionaries()
    buf = io.BytesIO()
    rows = _manifests_pieces.PIECE_ROWS
    if table.num_rows > rows:
        _manifests_pieces.write_pieces(table, buf, rows, **WRITE_OPTIONS)
    else:
        pq.write_table(table.combine_chunks(), buf, **WRITE_OPTIONS)
    return buf.getvalue()


def read_part_rows(data: bytes) -> int:
    """The rows of a manifests file (its footer alone)."""
    return int(pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows)


def fetch_parts(parts: Sequence[BulkPart], blobs: Mapping[str, bytes | None]
                ) -> list[tuple[bytes, tuple[str, ...], bool]]:
    """Each part's bytes (checked against its listed size), its whole arrays and whether its
    rows supersede earlier parts' rows of the same chunks (:attr:`BulkPart.over`)."""
    out = []
    for p in parts:
        data = blobs.get(p.file)
        if data is None:
            raise InvalidReferenceError(
                f"{p.file} is missing though .zmetadata lists it; re-create the sidecar")
        if p.rows >= 0 and len(data) != p.bytes:  # (a plain entry's file: as before)
            raise InvalidReferenceError(
                f"{p.file} is {len(data)} bytes, .zmetadata lists {p.bytes}: the cube was "
                "damaged or rewritten while read; open it again or rebuild it")
        out.append((data, p.whole, p.over))
    return out
