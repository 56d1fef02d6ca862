"""A collection's stac-geoparquet as a folder of parts, updated in what changed.

``STACDIR/<collection>/items.parquet/`` holds ``part-NNNNNN.parquet`` files (stac-geoparquet,
:mod:`._stac_geoparquet`), all of one schema, which DuckDB (``read_parquet('.../*.parquet')``),
``pyarrow.dataset`` and ``pyarrow.parquet.read_table`` read as one table.  The item database
records where each item's row is (table ``parquet_rows``: part, row number, and the version of
the item written there), so that a run:

* writes the new and changed items into new parts (of at most :data:`PART_ROWS`);
* rewrites, from Arrow (no item is converted again), only the parts that held a changed or
  removed item, without those rows;
* merges the small parts into larger ones when more than :data:`MAX_SMALL_PARTS` are left;
* writes everything again only when most items changed, when the rows' schema or geometry
  types grew (every part keeps one schema), or when the caller asks (collection renamed).

New files are written first, then the records committed, then replaced files deleted; a run
killed between those steps leaves files that no record names, deleted by the next run (and
records of missing files, whose items are written again).  Each part's ``stac-geoparquet`` key
holds the collection document as it was when that part was written.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from h5sidecar.catalog.geoparquet._stac_geoparquet import (
    ROW_GROUP,
    file_metadata,
    infer_schema,
    items_table,
)

__all__ = ["MAX_SMALL_PARTS", "PART_ROWS", "PartsUpdate", "update_parts"]

#: Most rows in one part (rows of new items are written in parts of this size).
PART_ROWS = 20_000
#: Parts smaller than half :data:`PART_ROWS` are merged when more than this many are left.
MAX_SMALL_PARTS = 8
_PART = re.compile(r"part-(\d{6,})\.parquet")
#: An item's version: what changes when its row must be written again.
_VERSION = "coalesce(i.sidecar, '') || char(31) || coalesce(i.identity, '') || char(31) || i.id"

Docs = Callable[[list[int]], Iterator[dict[str, Any]]]


@dataclass(frozen=True)
class PartsUpdate:
    """What a run wrote: rows converted from items, parts written (new, rewritten, merged)
    and removed, and whether every part was written again."""

    converted: int
    written: int
    removed: int
    full: bool


def update_parts(db: sqlite3.Connection, folder: Path, cid: str,
                 collection_doc: Mapping[str, Any], docs_of: Docs, *,
                 full: bool = False) -> PartsUpdate:  # fmt: skip
    """Bring ``folder`` up to date with the collection's items in the database (see module
    docs).  ``docs_of(keys)`` yields the item documents of ``keys`` in key order."""
    parts = _Parts(db, folder, cid, collection_doc)
    parts.reconcile()
    stale = db.execute(
        f"SELECT p.key, p.part, p.row FROM parquet_rows p LEFT JOIN items i ON i.key = p.key "
        f"WHERE p.collection = ? AND (i.key IS NULL OR i.collection IS NOT p.collection OR "
        f"{_VERSION} IS NOT p.version)", (cid,)).fetchall()  # fmt: skip
    fresh = [k for (k,) in db.execute(
        f"SELECT i.key FROM items i LEFT JOIN parquet_rows p ON p.key = i.key "
        f"WHERE i.collection = ? AND (p.key IS NULL OR p.collection IS NOT i.collection OR "
        f"{_VERSION} IS NOT p.version) ORDER BY i.key", (cid,))]  # fmt: skip
    total = db.execute("SELECT count(*) FROM items WHERE collection = ?", (cid,)).fetchone()[0]
    if not full and not stale and not fresh:
        return PartsUpdate(0, 0, 0, False)
    base, types = parts.schema()
    if not full and 2 * len(fresh) <= total:
        schema, seen = infer_schema(docs_of(fresh), cid, base)
        if base is None or (schema.equals(base) and seen <= types):
            return parts.incremental(stale, fresh, schema if base is None else base,
                                     types | seen, docs_of)  # fmt: skip
    return parts.rewrite(docs_of)


class _Parts:
    """The parts of one collection's folder and their records (see module docs)."""

    def __init__(self, db: sqlite3.Connection, folder: Path, cid: str,
                 collection_doc: Mapping[str, Any]) -> None:  # fmt: skip
        self.db, self.folder, self.cid, self.doc = db, folder, cid, collection_doc
        self.replaced: list[Path] = []
        self.written = 0

    def reconcile(self) -> None:
        """Forget records of missing parts, delete parts no record names (a killed run's), and
        replace a single-file ``items.parquet`` of earlier versions by a folder."""
        if self.folder.is_file():
            self.folder.unlink()
        self.folder.mkdir(parents=True, exist_ok=True)
        files = {p.name for p in self.folder.iterdir() if _PART.fullmatch(p.name)}
        known = {p for (p,) in self.db.execute(
            "SELECT DISTINCT part FROM parquet_rows WHERE collection = ?", (self.cid,))}
        for name in known - files:
            self.db.execute("DELETE FROM parquet_rows WHERE collection = ? AND part = ?",
                            (self.cid, name))  # fmt: skip
        for name in files - known:
            (self.folder / name).unlink()
        self.db.commit()

    def schema(self) -> tuple[Any, set[str]]:
        """The parts' schema (without metadata) and geometry types; None without parts."""
        import pyarrow.parquet as pq

        row = self.db.execute("SELECT part FROM parquet_rows WHERE collection = ? LIMIT 1",
                              (self.cid,)).fetchone()  # fmt: skip
        if row is None:
            return None, set()
        schema = pq.read_schema(self.folder / row[0])
        geo = json.loads((schema.metadata or {}).get(b"geo", b"{}"))
        types = geo.get("columns", {}).get("geometry", {}).get("geometry_types", [])
        return schema.remove_metadata(), set(types)

    # -- writing --------------------------------------------------------------------------------
    def _name(self) -> str:
        seqs = [int(m.group(1)) for p in self.folder.iterdir() if (m := _PART.fullmatch(p.name))]
        return f"part-{max(seqs, default=0) + 1:06d}.parquet"

    def _write(self, table: Any, types: set[str]) -> str:
        import pyarrow.parquet as pq

        name = self._name()
        tmp = self.folder / f".{name}.tmp"
        meta = file_metadata(types, self.cid, self.doc)
        pq.write_table(table.replace_schema_metadata(meta), tmp, compression="zstd",
                       row_group_size=ROW_GROUP)  # fmt: skip
        tmp.replace(self.folder / name)
        self.written += 1
        return name

    def _record(self, name: str, keys: list[int]) -> None:
        """Record ``keys`` as rows 0.. of part ``name``, at the items' current versions."""
        self.db.executemany(
            f"INSERT OR REPLACE INTO parquet_rows (key, collection, part, row, version) "
            f"SELECT i.key, i.collection, ?, ?, {_VERSION} FROM items i WHERE i.key = ?",
            [(name, n, k) for n, k in enumerate(keys)])  # fmt: skip

    def _new_parts(self, keys: Iterable[int], schema: Any, types: set[str],
                   docs_of: Docs) -> int:  # fmt: skip
        converted = 0
        for chunk in _chunked(keys, PART_ROWS):
            name = self._write(items_table(docs_of(chunk), self.cid, schema), types)
            self._record(name, chunk)
            converted += len(chunk)
        return converted

    def _finish(self) -> int:
        self.db.commit()
        for path in self.replaced:
            path.unlink(missing_ok=True)
        return len(self.replaced)

    def incremental(self, stale: list[tuple[int, str, int]], fresh: list[int], schema: Any,
                    types: set[str], docs_of: Docs) -> PartsUpdate:  # fmt: skip
        """Rewrite the parts holding stale rows without them, add the fresh items, merge."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        by_part: dict[str, set[int]] = {}
        for _, part, row in stale:
            by_part.setdefault(part, set()).add(row)
        self.db.executemany("DELETE FROM parquet_rows WHERE key = ? AND collection = ?",
                            [(k, self.cid) for k, _, _ in stale])  # fmt: skip
        for part, rows in sorted(by_part.items()):
            table = pq.read_table(self.folder / part)
            keep = [n for n in range(table.num_rows) if n not in rows]
            self.replaced.append(self.folder / part)
            if keep:
                keys = self._keys_at(part, keep)
                name = self._write(table.take(pa.array(keep)), types)
                self._record(name, keys)
        converted = self._new_parts(fresh, schema, types, docs_of)
        self._merge_small(types)
        return PartsUpdate(converted, self.written, self._finish(), False)

    def _keys_at(self, part: str, rows: list[int]) -> list[int]:
        at = dict(self.db.execute("SELECT row, key FROM parquet_rows WHERE collection = ? AND "
                                  "part = ?", (self.cid, part)).fetchall())  # fmt: skip
        return [at[n] for n in rows]

    def _merge_small(self, types: set[str]) -> None:
        """Merge the parts under half :data:`PART_ROWS` rows, in order, when there are more
        than :data:`MAX_SMALL_PARTS` of them (each merge halves their number at least, so a
        row is merged O(log) times: the work is amortised over the runs that added them)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        small = self.db.execute(
            "SELECT part, count(*) FROM parquet_rows WHERE collection = ? GROUP BY part "
            "HAVING count(*) < ? ORDER BY part", (self.cid, PART_ROWS // 2)).fetchall()
        if len(small) <= MAX_SMALL_PARTS:
            return
        group: list[str] = []
        size = 0
        for part, n in [*small, ("", PART_ROWS)]:
            if group and (size + n > PART_ROWS or not part):
                keys = [k for p in group for k in self._keys_at(p, list(range(self._rows(p))))]
                table = pa.concat_tables([pq.read_table(self.folder / p) for p in group])
                name = self._write(table, types)
                self._record(name, keys)
                self.replaced += [self.folder / p for p in group]
                group, size = [], 0
            group.append(part)
            size += n

    def _rows(self, part: str) -> int:
        return int(self.db.execute("SELECT count(*) FROM parquet_rows WHERE collection = ? "
                                   "AND part = ?", (self.cid, part)).fetchone()[0])  # fmt: skip

    def rewrite(self, docs_of: Docs) -> PartsUpdate:
        """Write every item again (two passes over the documents: schema, then rows)."""
        self.replaced = [p for p in self.folder.iterdir() if _PART.fullmatch(p.name)]
        self.db.execute("DELETE FROM parquet_rows WHERE collection = ?", (self.cid,))
        schema, types = infer_schema(
            (d for chunk in _chunked(self._all_keys(), PART_ROWS) for d in docs_of(chunk)),
            self.cid)  # fmt: skip
        converted = 0
        if schema is not None:
            converted = self._new_parts(self._all_keys(), schema, types, docs_of)
        return PartsUpdate(converted, self.written, self._finish(), True)

    def _all_keys(self) -> Iterator[int]:
        after = 0
        while True:
            keys = [k for (k,) in self.db.execute(
                "SELECT key FROM items WHERE collection = ? AND key > ? ORDER BY key LIMIT ?",
                (self.cid, after, PART_ROWS))]  # fmt: skip
            if not keys:
                return
            yield from keys
            after = keys[-1]


def _chunked(keys: Iterable[int], size: int) -> Iterator[list[int]]:
    chunk: list[int] = []
    for k in keys:
        chunk.append(k)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
