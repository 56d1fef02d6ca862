"""One run of ``h5sidecar catalog``: sync the item database with DEST, then write what changed.

Steps: (1) :func:`._sync.sync_dest` reads only new or changed sidecars; (2) the collection id is
settled (a renamed collection moves its items); (3) the item documents of changed rows are
written, those of removed rows deleted; (4) the collection's extent is computed in SQL (no list
of items is held), its document and the root's are written when their text changes; (5) the
stac-geoparquet parts of the changed and removed items are written (:mod:`~h5sidecar.catalog.geoparquet._parts`).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import posixpath
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from h5sidecar.catalog._catalogue import add_cubes, catalogue_one
from h5sidecar.catalog._item_db import delete_rows
from h5sidecar.catalog._result import CatalogResult, NoFootprint
from h5sidecar.catalog._sync import reset_dest, sync_dest
from h5sidecar.catalog._tree import (
    item_document,
    item_path,
    remove_item,
    write_collection,
    write_item,
    write_root,
)
from h5sidecar.catalog._validate import ShapeValidator, validate_document
from h5sidecar.catalog.extent._bbox_union import union_bbox
from h5sidecar.dest import GranuleInfo
from h5sidecar.references import GranuleRefs
from h5sidecar.settings import RecordSettings

__all__ = ["JSON_TREE_MAX_ITEMS", "ROOT_ID", "Run"]

ROOT_ID = "h5sidecar"
#: Collections of at most this many items are also written as a static JSON tree (one document
#: per item, linked from the collection); larger ones only as stac-geoparquet and in the item
#: database the STAC API searches.
JSON_TREE_MAX_ITEMS = 10_000

log = logging.getLogger("h5sidecar.catalog")
_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
#: Rows read per query when documents are streamed back from the database.
_BATCH = 2000
GEOPARQUET_NAME = "items.parquet"


class Run:
    """The state of one catalog run over one DEST (see module docs)."""

    def __init__(self, db: sqlite3.Connection, root_dir: Path, dest: str, *,
                 gateway_url: str | None, references_base_url: str | None,
                 storage_options: Mapping[str, Any] | None,
                 track_footprints: Literal["recorded", "read"] = "recorded",
                 record_settings: RecordSettings | None = None) -> None:  # fmt: skip
        self.db, self.root_dir, self.dest = db, root_dir, dest
        self.record_settings = record_settings
        self.gateway_url = gateway_url
        self.storage_options = storage_options
        self.catalogue = functools.partial(
            catalogue_one, dest=dest, gateway_url=gateway_url,
            references_base_url=references_base_url, storage_options=storage_options,
            track_footprints=track_footprints)
        self.references_base_url = references_base_url
        settings: dict[str, Any] = {"gateway_url": gateway_url,
                                    "references_base_url": references_base_url,
                                    "item_format": 2}  # fmt: skip
        # item_format 2: assets open with engine="h5sidecar" (a catalog of 1 is rebuilt)
        if track_footprints != "recorded":  # (only then: the runs of before keep their items)
            settings["track_footprints"] = track_footprints
        self.settings = json.dumps(settings, sort_keys=True)

    def build(self, *, collection_id: str | None, title: str | None, description: str | None,
              validate: bool, progress: Callable[[str, bool], None] | None,
              given: list[tuple[GranuleInfo, GranuleRefs]], json_tree: bool | None,
              geoparquet: bool) -> CatalogResult:  # fmt: skip
        """Run (see module docs)."""
        from h5sidecar.errors import SourceNotFoundError

        db, dest = self.db, self.dest
        prior = db.execute("SELECT collection, settings, json_tree FROM runs WHERE dest = ?",
                           (dest,)).fetchone()  # fmt: skip
        removed: list[tuple[str, str]] = []
        rewrite_all = False
        if prior is not None and prior[1] != self.settings:
            removed += reset_dest(db, dest)  # what every item says changed: all are rebuilt
        synced = sync_dest(db, dest, collection_id or (prior[0] if prior else ""),
                           self.catalogue, storage_options=self.storage_options,
                           progress=progress, record_settings=self.record_settings)  # fmt: skip
        if synced.listed == 0:
            raise SourceNotFoundError(
                f"no sidecar under {dest}: index granules first (h5sidecar index SOURCE -o {dest})")
        removed += synced.removed
        cid = collection_id or self._default_id()
        moved = db.execute("SELECT key, collection, id FROM items WHERE dest = ? AND "
                           "collection != ?", (dest, cid)).fetchall()  # fmt: skip
        if moved:  # the collection was renamed: its items move
            removed += [(c, i) for _, c, i in moved]
            db.execute("UPDATE items SET collection = ? WHERE dest = ?", (cid, dest))
            rewrite_all = True
        others = db.execute("SELECT key, collection, id FROM items WHERE collection = ? AND "
                            "dest IS NOT ?", (cid, dest)).fetchall()  # fmt: skip
        if others:  # one DEST per collection: another DEST's items are replaced
            delete_rows(db, (k for k, _, _ in others))
            removed += [(c, i) for _, c, i in others]
            rewrite_all = True
        db.execute("DELETE FROM runs WHERE collection = ? AND dest != ?", (cid, dest))
        n_items = db.execute("SELECT count(*) FROM items WHERE collection = ?",
                             (cid,)).fetchone()[0]  # fmt: skip
        tree = json_tree if json_tree is not None else n_items <= JSON_TREE_MAX_ITEMS
        if prior is not None and bool(prior[2]) != tree:
            rewrite_all = True
        if prior != (cid, self.settings, int(tree)):
            db.execute("INSERT OR REPLACE INTO runs VALUES (?,?,?,?)",
                       (dest, cid, self.settings, int(tree)))  # fmt: skip
        db.commit()
        for err in synced.errors:
            # info, not warning: the result's errors carry it, and the CLI prints them once
            log.info("%s left out of the catalog: %s", err.name, err.message)
        validator = ShapeValidator() if validate else None
        coll_title = title or cid
        root_title = self._root_title()
        for c, i in removed:
            remove_item(self.root_dir, c, i)
        if not tree and rewrite_all:
            for doc in self._docs(cid):
                remove_item(self.root_dir, cid, str(doc["id"]))
        docs = self._docs(cid) if rewrite_all else self._docs_of(synced.changed)
        for doc in docs:
            where = str(doc["id"])
            if tree:
                where = str(write_item(self.root_dir, cid, doc, root_title, coll_title))
            if validator is not None:
                validator.validate(item_document(doc, cid, root_title, coll_title), where=where)
        coll_doc, cube_names = self._collection(cid, title=coll_title, description=description,
                                    given=given, found=synced.cubes)  # fmt: skip
        parquet = self.root_dir / cid / GEOPARQUET_NAME
        extra = [{"rel": "alternate", "href": f"./{GEOPARQUET_NAME}",
                  "type": "application/vnd.apache.parquet",
                  "title": "All items as stac-geoparquet"}] if geoparquet else []
        ids = self._ids(cid) if tree else iter(())
        coll_path = write_collection(self.root_dir, coll_doc, ids, root_title, extra)
        root_path = write_root(self.root_dir, cid, coll_title, self._default_root())
        if validate:
            validate_document(json.loads(coll_path.read_text("utf-8")), where=str(coll_path))
            validate_document(json.loads(root_path.read_text("utf-8")), where=str(root_path))
        # marked when the parts were last brought up to date; any change to an item since (in
        # this run or one killed before its end) dropped the mark, in its own transaction
        parts_clean = db.execute("SELECT 1 FROM parquet_clean WHERE dest = ?",
                                 (dest,)).fetchone() is not None  # fmt: skip
        if geoparquet and (rewrite_all or not parts_clean or not parquet.is_dir()):
            from h5sidecar.catalog.geoparquet._parts import update_parts

            # (it compares its records with every item: a no-op run skips that when the run
            # before brought the parts up to date)
            update_parts(db, parquet, cid, coll_doc, self._docs_of, full=rewrite_all)
        if geoparquet and not parts_clean:
            db.execute("INSERT OR IGNORE INTO parquet_clean VALUES (?)", (dest,))
            db.commit()
        items = tuple(str(item_path(self.root_dir, cid, i)) for i in self._ids(cid)) if tree else ()
        return CatalogResult(
            str(root_path), str(coll_path), cid, items, tuple(synced.errors),
            cube_names,
            tuple(self._no_footprint(cid)), added=synced.added, updated=synced.updated,
            removed=len(synced.removed), unchanged=synced.unchanged,
            geoparquet=str(parquet) if geoparquet else "", n_items=n_items)

    # -- reading back -------------------------------------------------------------------------
    def _docs(self, cid: str) -> Iterator[dict[str, Any]]:
        after = 0
        while True:
            rows = self.db.execute("SELECT key, doc FROM items WHERE collection = ? AND key > ? "
                                   "ORDER BY key LIMIT ?", (cid, after, _BATCH)).fetchall()
            if not rows:
                return
            for _, doc in rows:
                yield json.loads(doc)
            after = rows[-1][0]

    def _docs_of(self, keys: list[int]) -> Iterator[dict[str, Any]]:
        for i in range(0, len(keys), _BATCH):
            part = keys[i : i + _BATCH]
            q = f"SELECT doc FROM items WHERE key IN ({','.join('?' * len(part))}) ORDER BY key"
            for (doc,) in self.db.execute(q, part).fetchall():
                yield json.loads(doc)

    def _ids(self, cid: str) -> Iterator[str]:
        after = 0
        while True:
            rows = self.db.execute("SELECT key, id FROM items WHERE collection = ? AND key > ? "
                                   "ORDER BY key LIMIT ?", (cid, after, 10 * _BATCH)).fetchall()
            if not rows:
                return
            for _, i in rows:
                yield i
            after = rows[-1][0]

    def _default_id(self) -> str:
        names = [n for (n,) in self.db.execute(
            "SELECT DISTINCT coalesce(short_name, '') FROM items WHERE dest = ? LIMIT 2",
            (self.dest,))]
        if len(names) == 1 and names[0] != "":
            return _ID_CHARS.sub("-", names[0].lower())
        return _ID_CHARS.sub("-", posixpath.basename(self.dest.rstrip("/")) or "granules")

    def _no_footprint(self, cid: str) -> Iterator[NoFootprint]:
        for (doc,) in self.db.execute("SELECT doc FROM items WHERE collection = ? AND s IS NULL "
                                      "ORDER BY key", (cid,)):  # fmt: skip
            props = json.loads(doc)["properties"]
            name, why = props.get("title", ""), props.get("h5sidecar:no_footprint", "")
            log.info("%s has no footprint: %s", name, why)
            yield NoFootprint(name, why)

    # -- documents ----------------------------------------------------------------------------
    def _root_title(self) -> str:
        path = self.root_dir / "catalog.json"
        if path.is_file():
            return str(json.loads(path.read_text("utf-8")).get("title", ""))
        return str(self._default_root()["title"])

    @staticmethod
    def _default_root() -> dict[str, Any]:
        return {"type": "Catalog", "id": ROOT_ID, "stac_version": "1.1.0",
                "description": "Granules indexed by h5sidecar", "links": [],
                "title": "h5sidecar catalog"}  # fmt: skip

    def _extent(self, cid: str) -> tuple[list[float], list[dt.datetime | None]]:
        db = self.db
        bbox = _union_from_db(db, cid)
        first = db.execute("SELECT doc FROM items WHERE collection = ? ORDER BY start LIMIT 1",
                           (cid,)).fetchone()  # fmt: skip
        last = db.execute('SELECT doc FROM items WHERE collection = ? ORDER BY "end" DESC '
                          "LIMIT 1", (cid,)).fetchone()  # fmt: skip
        if first is None or last is None:
            return bbox, [None, None]
        start = json.loads(first[0])["properties"]["start_datetime"]
        end = json.loads(last[0])["properties"]["end_datetime"]
        return bbox, [dt.datetime.fromisoformat(start), dt.datetime.fromisoformat(end)]

    def _collection(self, cid: str, *, title: str, description: str | None,
                    given: list[tuple[GranuleInfo, GranuleRefs]],
                    found: list[tuple[GranuleInfo, GranuleRefs]],
                    ) -> tuple[dict[str, Any], tuple[str, ...]]:  # fmt: skip
        import pystac

        bbox, interval = self._extent(cid)
        collection = pystac.Collection(
            id=cid, title=title,
            description=description or f"Granules indexed by h5sidecar under {self.dest}",
            extent=pystac.Extent(pystac.SpatialExtent([bbox]),
                                 pystac.TemporalExtent([interval])),
            license="other", stac_extensions=[],
        )  # fmt: skip
        names = add_cubes(collection, given, found, dest=self.dest,
                           gateway_url=self.gateway_url,
                           references_base_url=self.references_base_url)  # fmt: skip
        return dict(collection.to_dict(include_self_link=False, transform_hrefs=False)), names


def _union_from_db(db: sqlite3.Connection, cid: str) -> list[float]:
    """:func:`union_bbox` of the collection's item boxes, streamed: the longitude spans are
    merged in SQL order first (what ``union_bbox`` does), so only the merged spans are held."""
    s, n = db.execute("SELECT min(s), max(n) FROM items WHERE collection = ? AND s IS NOT NULL",
                      (cid,)).fetchone()  # fmt: skip
    if s is None:
        return [-180.0, -90.0, 180.0, 90.0]
    merged: list[list[float]] = []
    for w, e in db.execute("SELECT w, CASE WHEN e < w THEN e + 360.0 ELSE e END FROM items "
                           "WHERE collection = ? AND s IS NOT NULL ORDER BY 1", (cid,)):
        if merged and w <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([w, e])
        if merged[-1][1] - merged[-1][0] >= 360.0:
            return [-180.0, float(s), 180.0, float(n)]
    return union_bbox([[w, s, e - 360.0 if e > 180.0 else e, n] for w, e in merged])

