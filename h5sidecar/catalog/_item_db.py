"""The catalog's item database: ``STACDIR/_items.sqlite`` (SQLite from the standard library).

One row per catalogued sidecar, keyed by the sidecar's URL and identity (size and modification
time of its file, or of a Parquet sidecar's ``.zmetadata``), so that ``h5sidecar catalog``
re-reads only new or changed sidecars and drops removed ones; the same rows answer the STAC
API (:mod:`~h5sidecar.catalog.search._item_query`): an R-tree over longitude, latitude and time finds the candidates of a
bbox/datetime search, ``(collection, id)`` is indexed for ``item()``, and the integer ``key``
orders pages (keyset cursor).

Times are stored as POSIX seconds (``REAL``: microseconds are exact for dates up to year
2255) and compared exactly; the R-tree holds 32-bit floats, rounded outwards by SQLite, so it
only narrows the candidates and the exact test is made on the ``items`` columns.  A box that
crosses the antimeridian (west > east) is two R-tree entries.  Items without a bbox sit outside
the latitude range in the R-tree (a time-only search still finds them, a bbox search never).
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["DB_NAME", "SCHEMA", "ItemRow", "connect", "item_row", "spans_of", "write_row"]

#: Name of the item database in the catalog folder (hidden from the static routes).
DB_NAME = "_items.sqlite"
#: R-tree stand-ins for open time bounds and for "no bbox" (outside every latitude searched).
OPEN = 3.0e38
NO_BOX_LAT = 1000.0
SCHEMA_VERSION = 3  # 2: parquet_rows; 3: parquet_clean and its triggers

SCHEMA = f"""
PRAGMA user_version = {SCHEMA_VERSION};
CREATE TABLE IF NOT EXISTS items (
    key INTEGER PRIMARY KEY,
    collection TEXT NOT NULL,
    id TEXT NOT NULL,
    dest TEXT,
    sidecar TEXT,
    identity TEXT,
    w REAL, s REAL, e REAL, n REAL,
    start REAL, "end" REAL,
    short_name TEXT,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS items_by_id ON items (collection, id);
CREATE INDEX IF NOT EXISTS items_by_id_only ON items (id);
CREATE INDEX IF NOT EXISTS items_by_sidecar ON items (dest, sidecar);
-- entry ids: 2*key (and 2*key+1 for the second half of a box across the antimeridian)
CREATE VIRTUAL TABLE IF NOT EXISTS items_rtree USING rtree (
    rid, minx, maxx, miny, maxy, mint, maxt, +key INTEGER
);
CREATE TABLE IF NOT EXISTS runs (
    dest TEXT PRIMARY KEY,
    collection TEXT NOT NULL,
    settings TEXT NOT NULL,
    json_tree INTEGER NOT NULL
);
-- where each item's row is in its collection's stac-geoparquet parts (_geoparquet_parts)
CREATE TABLE IF NOT EXISTS parquet_rows (
    key INTEGER PRIMARY KEY,
    collection TEXT NOT NULL,
    part TEXT NOT NULL,
    row INTEGER NOT NULL,
    version TEXT
);
CREATE INDEX IF NOT EXISTS parquet_rows_by_part ON parquet_rows (collection, part);
-- DESTs whose items have not changed since their parts were last brought up to date: any
-- change to an item forgets its DEST's mark, in the transaction of the change
CREATE TABLE IF NOT EXISTS parquet_clean (dest TEXT PRIMARY KEY);
CREATE TRIGGER IF NOT EXISTS items_insert_dirties AFTER INSERT ON items
    BEGIN DELETE FROM parquet_clean WHERE dest = NEW.dest; END;
CREATE TRIGGER IF NOT EXISTS items_update_dirties AFTER UPDATE ON items
    BEGIN DELETE FROM parquet_clean WHERE dest IN (OLD.dest, NEW.dest); END;
CREATE TRIGGER IF NOT EXISTS items_delete_dirties AFTER DELETE ON items
    BEGIN DELETE FROM parquet_clean WHERE dest = OLD.dest; END;
CREATE TABLE IF NOT EXISTS left_out (
    dest TEXT NOT NULL,
    sidecar TEXT NOT NULL,
    identity TEXT NOT NULL,
    kind TEXT NOT NULL,
    error TEXT NOT NULL,
    PRIMARY KEY (dest, sidecar)
);
"""


def connect(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection to the item database at ``path`` (created with its schema unless
    ``readonly``)."""
    if readonly:
        db = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True,
                             check_same_thread=False)  # fmt: skip
        db.execute("PRAGMA query_only = 1")
        return db
    # the default rollback journal, not WAL: a served catalog folder may be read-only, and a
    # read-only WAL database needs its -shm file; readers wait out a commit (timeout)
    db = sqlite3.connect(str(path), timeout=60.0)
    if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
        db.executescript(SCHEMA)  # only then: a run that changes nothing writes nothing
    return db


@dataclass(frozen=True)
class ItemRow:
    """What the database holds of one item (``doc`` is the item's JSON text)."""

    collection: str
    id: str
    bbox: tuple[float, float, float, float] | None
    start: float | None
    end: float | None
    doc: str
    dest: str | None = None
    sidecar: str | None = None
    identity: str | None = None
    short_name: str | None = None


def _seconds(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    t = dt.datetime.fromisoformat(text)
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def item_row(doc: Mapping[str, Any], collection: str, **where: Any) -> ItemRow:
    """The row of an item document (its bbox and time range pulled out for searching)."""
    props = doc.get("properties", {})
    instant = _seconds(props.get("datetime"))
    start = _seconds(props.get("start_datetime"))
    end = _seconds(props.get("end_datetime"))
    start, end = instant if start is None else start, instant if end is None else end
    bbox = doc.get("bbox")
    box = None
    if bbox:
        w, s, e, n = (bbox[0], bbox[1], bbox[3], bbox[4]) if len(bbox) == 6 else bbox
        box = (float(w), float(s), float(e), float(n))
    short = props.get("h5sidecar:attributes", {}).get("short_name")
    return ItemRow(collection, str(doc["id"]), box, start, end,
                   json.dumps(doc, separators=(",", ":")),
                   short_name=None if short is None else str(short), **where)  # fmt: skip


def spans_of(w: float, e: float) -> list[tuple[float, float]]:
    """A box's longitude range as one or two plain intervals (crossing boxes have w > e)."""
    return [(w, e)] if w <= e else [(w, 180.0), (-180.0, e)]


def write_row(db: sqlite3.Connection, row: ItemRow, key: int | None = None) -> int:
    """Insert the row (or replace the one at ``key``, which keeps its place in pages)."""
    values = (row.collection, row.id, row.dest, row.sidecar, row.identity,
              *(row.bbox or (None, None, None, None)), row.start, row.end, row.short_name,
              row.doc)  # fmt: skip
    if key is None:
        cur = db.execute(
            'INSERT INTO items (collection, id, dest, sidecar, identity, w, s, e, n, start, "end", '
            "short_name, doc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", values)
        key = int(cur.lastrowid or 0)
    else:
        db.execute(
            'UPDATE items SET collection=?, id=?, dest=?, sidecar=?, identity=?, w=?, s=?, e=?, '
            'n=?, start=?, "end"=?, short_name=?, doc=? WHERE key=?', (*values, key))
        _delete_entries(db, key)
    t0 = -OPEN if row.start is None else row.start
    t1 = OPEN if row.end is None else row.end
    if row.bbox is None:
        entries = [(-180.0, 180.0, NO_BOX_LAT, NO_BOX_LAT)]
    else:
        w, s, e, n = row.bbox
        entries = [(a, b, s, n) for a, b in spans_of(w, e)]
    db.executemany(
        "INSERT INTO items_rtree (rid, minx, maxx, miny, maxy, mint, maxt, key) "
        "VALUES (?,?,?,?,?,?,?,?)",
        [(2 * key + i, a, b, s, n, t0, t1, key) for i, (a, b, s, n) in enumerate(entries)])
    return key


def _delete_entries(db: sqlite3.Connection, key: int) -> None:
    # an item's entries have ids 2*key and 2*key+1: found through the R-tree's own index
    # (its auxiliary ``key`` column has none, and a scan per item is quadratic)
    db.execute("DELETE FROM items_rtree WHERE rid IN (?, ?)", (2 * key, 2 * key + 1))


def delete_rows(db: sqlite3.Connection, keys: Iterable[int]) -> None:
    """Delete items by key (and their R-tree entries)."""
    for key in keys:
        db.execute("DELETE FROM items WHERE key = ?", (key,))
        _delete_entries(db, key)


def iter_docs(db: sqlite3.Connection, collection: str, batch: int = 2000) -> Iterator[str]:
    """The item documents (JSON text) of a collection in key order, read in batches."""
    after = 0
    while True:
        rows = db.execute("SELECT key, doc FROM items WHERE collection = ? AND key > ? "
                          "ORDER BY key LIMIT ?", (collection, after, batch)).fetchall()
        if not rows:
            return
        for _, doc in rows:
            yield doc
        after = rows[-1][0]


def load_tree(db: sqlite3.Connection, root_dir: Path, root: Mapping[str, Any]) -> dict[str, Any]:
    """Fill an empty database from a static catalog folder (one written without the database,
    or by hand): its collections' items, in link order.  Returns the collections by id."""
    collections: dict[str, Any] = {}
    for link in root.get("links", []):
        if link.get("rel") != "child":
            continue
        path = root_dir / link["href"]
        coll = json.loads(path.read_text("utf-8"))
        if coll.get("type") != "Collection":
            continue
        collections[coll["id"]] = coll
        for item_link in coll.get("links", []):
            if item_link.get("rel") == "item":
                doc = json.loads((path.parent / item_link["href"]).read_text("utf-8"))
                write_row(db, item_row(doc, coll["id"]))
    db.commit()
    return collections
