"""Bring the item database up to date with DEST: only new, changed and removed sidecars cost work.

Each sidecar listed under DEST is looked up by (DEST, sidecar URL); when its identity (see
:mod:`h5sidecar.dest._sidecar_listing`) is the one recorded, nothing is read.  Otherwise its item is built again (the
row keeps its key, so its place in search pages) or, when it cannot be catalogued, its reason is
recorded in ``left_out`` and reported on every run until the sidecar changes.  Rows whose sidecar
is no longer listed are removed.  Work is committed every :data:`COMMIT_EVERY` sidecars, so an
interrupted run keeps what it did and the next run goes on from there.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from h5sidecar.catalog._item_db import delete_rows, item_row, write_row
from h5sidecar.catalog._result import ItemError
from h5sidecar.dest import GranuleInfo, dest_fs, iter_sidecars, sidecar_size
from h5sidecar.references import GranuleRefs, read_refs
from h5sidecar.settings import RecordSettings

__all__ = ["COMMIT_EVERY", "Synced", "sync_dest"]

COMMIT_EVERY = 1000
#: Kind recorded in ``left_out`` for a datacube found in DEST (a Collection asset, not an Item).
CUBE = "cube"


@dataclass
class Synced:
    """What a sync changed (keys of new or rebuilt rows; ids of removed items)."""

    changed: list[int] = field(default_factory=list)
    removed: list[tuple[str, str]] = field(default_factory=list)
    listed: int = 0
    unchanged: int = 0
    added: int = 0
    updated: int = 0
    errors: list[Any] = field(default_factory=list)  # ItemError
    cubes: list[tuple[GranuleInfo, GranuleRefs]] = field(default_factory=list)


def reset_dest(db: sqlite3.Connection, dest: str) -> list[tuple[str, str]]:
    """Forget every row of DEST (its settings changed); returns the removed (collection, id)."""
    gone = db.execute("SELECT key, collection, id FROM items WHERE dest = ?", (dest,)).fetchall()
    delete_rows(db, (k for k, _, _ in gone))
    db.execute("DELETE FROM left_out WHERE dest = ?", (dest,))
    db.commit()
    return [(c, i) for _, c, i in gone]


def sync_dest(
    db: sqlite3.Connection,
    dest: str,
    collection: str,
    catalogue: Callable[[GranuleInfo], Any],
    *,
    storage_options: Mapping[str, Any] | None = None,
    progress: Callable[[str, bool], None] | None = None,
    record_settings: RecordSettings | None = None,
) -> Synced:
    """Update the rows of DEST (see module docs); ``catalogue(granule)`` returns the granule's
    Item dict, an ``ItemError`` or a cube's ``GranuleRefs``.  New rows go to ``collection``.
    ``record_settings``: the record cache of an object-store DEST (its failed granules)."""
    fs, _ = dest_fs(dest, storage_options)
    out = Synced()
    db.execute("CREATE TEMP TABLE IF NOT EXISTS seen (key INTEGER PRIMARY KEY)")
    db.execute("CREATE TEMP TABLE IF NOT EXISTS seen_out (sidecar TEXT PRIMARY KEY)")
    db.execute("DELETE FROM temp.seen")
    db.execute("DELETE FROM temp.seen_out")
    listed = iter_sidecars(dest, storage_options=storage_options, record_settings=record_settings)
    for n, (g, ident) in enumerate(listed, 1):
        out.listed = n
        row = db.execute("SELECT key, identity FROM items WHERE dest = ? AND sidecar = ?",
                         (dest, g.sidecar)).fetchone()  # fmt: skip
        if row is not None and row[1] == ident:
            db.execute("INSERT OR IGNORE INTO temp.seen VALUES (?)", (row[0],))
            out.unchanged += 1
            continue
        old = None if row is not None else db.execute(
            "SELECT identity, kind, error FROM left_out WHERE dest = ? AND sidecar = ?",
            (dest, g.sidecar)).fetchone()
        if old is not None and old[0] == ident:
            db.execute("INSERT OR IGNORE INTO temp.seen_out VALUES (?)", (g.sidecar,))
            if old[1] == CUBE:
                out.cubes.append((_sized(fs, g), read_refs(
                    g.sidecar, storage_options=dict(storage_options or {}) or None)))
            else:
                out.errors.append(ItemError(**json.loads(old[2])))
            out.unchanged += 1
            continue
        g = _sized(fs, g)
        res = catalogue(g)
        if isinstance(res, dict):
            r = item_row(res, collection, dest=dest, sidecar=g.sidecar, identity=ident)
            key = write_row(db, r, None if row is None else row[0])
            db.execute("INSERT OR IGNORE INTO temp.seen VALUES (?)", (key,))
            db.execute("DELETE FROM left_out WHERE dest = ? AND sidecar = ?", (dest, g.sidecar))
            out.changed.append(key)
            out.updated += row is not None
            out.added += row is None
        else:
            kind = CUBE if isinstance(res, GranuleRefs) else str(res.kind)
            if isinstance(res, GranuleRefs):
                out.cubes.append((g, res))
                error = ""
            else:
                out.errors.append(res)
                error = json.dumps(res.to_dict())
            db.execute("INSERT OR REPLACE INTO left_out VALUES (?,?,?,?,?)",
                       (dest, g.sidecar, ident, kind, error))  # fmt: skip
            db.execute("INSERT OR IGNORE INTO temp.seen_out VALUES (?)", (g.sidecar,))
        if progress is not None:
            progress(g.name, not isinstance(res, ItemError))
        if n % COMMIT_EVERY == 0:
            db.commit()
    gone = db.execute("SELECT key, collection, id FROM items WHERE dest = ? AND key NOT IN "
                      "(SELECT key FROM temp.seen)", (dest,)).fetchall()  # fmt: skip
    delete_rows(db, (k for k, _, _ in gone))
    out.removed = [(c, i) for _, c, i in gone]
    db.execute("DELETE FROM left_out WHERE dest = ? AND sidecar NOT IN "
               "(SELECT sidecar FROM temp.seen_out)", (dest,))  # fmt: skip
    db.commit()
    return out


def _sized(fs: Any, g: GranuleInfo) -> GranuleInfo:
    path = g.sidecar.split("://", 1)[1] if "://" in g.sidecar else g.sidecar
    return GranuleInfo(g.name, g.sidecar, g.format, sidecar_size(fs, path), g.layout)
