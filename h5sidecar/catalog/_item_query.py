"""STAC API item search as SQL over the item database (:mod:`._item_db`).

A search is one SQL statement: the R-tree narrows bbox and datetime to candidates, the exact
conditions (the same as :func:`h5sidecar.catalog.search_items`: boxes crossing the antimeridian
match on either side, an item's time range must overlap the interval) are then tested on the
``items`` columns, and pages follow the integer ``key`` (keyset: ``key > last``, so a page costs
the same wherever it is and stays stable while items are added).  ``intersects`` is tested with
shapely on the candidates of its bounding box.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from h5sidecar.catalog._item_db import OPEN, spans_of
from h5sidecar.catalog._search_params import SearchParams

__all__ = ["Page", "find_item", "search_page"]


@dataclass(frozen=True)
class Page:
    """One page of a search: ``(key, collection, doc)`` rows, the total, the next cursor."""

    rows: list[tuple[int, str, dict[str, Any]]]
    matched: int
    next_key: int | None


def _where(q: SearchParams) -> tuple[list[str], list[Any]]:
    """SQL conditions (and their parameters) of everything but ``intersects`` and paging."""
    conds: list[str] = []
    args: list[Any] = []
    box = q.bbox if q.bbox is not None else (
        q.intersects.bounds if q.intersects is not None else None)
    if box is not None or q.start is not None or q.end is not None:
        t0 = -OPEN if q.start is None else q.start.timestamp()
        t1 = OPEN if q.end is None else q.end.timestamp()
        if box is None:
            spans, lat = [(-OPEN, OPEN)], (-OPEN, OPEN)
        else:
            spans, lat = spans_of(box[0], box[2]), (box[1], box[3])
        tree = " OR ".join(["(maxx >= ? AND minx <= ?)"] * len(spans))
        conds.append(f"key IN (SELECT key FROM items_rtree WHERE ({tree}) AND maxy >= ? AND "
                     "miny <= ? AND maxt >= ? AND mint <= ?)")
        args += [v for a, b in spans for v in (a, b)] + [*lat, t0, t1]
        if q.start is not None:
            conds.append('"end" >= ?')
            args.append(t0)
        if q.end is not None:
            conds.append("start <= ?")
            args.append(t1)
        if box is not None:
            # exact: what the R-tree's 32-bit floats only approximate (see _search._boxes_intersect)
            lon = " OR ".join(["((w <= e AND w <= ? AND ? <= e) OR (w > e AND (w <= ? OR ? <= e)))"]
                              * len(spans))  # fmt: skip
            conds.append(f"s IS NOT NULL AND s <= ? AND n >= ? AND ({lon})")
            args += [box[3], box[1]] + [v for a, b in spans for v in (b, a, b, a)]
    if q.ids is not None:
        conds.append(f"id IN ({','.join('?' * len(q.ids))})")
        args += sorted(q.ids)
    if q.collections is not None:
        conds.append(f"collection IN ({','.join('?' * len(q.collections))})")
        args += sorted(q.collections)
    return conds, args


def _intersects(q: SearchParams, doc: dict[str, Any]) -> bool:
    from shapely.geometry import shape

    geom = doc.get("geometry")
    return bool(geom) and q.intersects.intersects(shape(geom))


def search_page(db: sqlite3.Connection, q: SearchParams) -> Page:
    """The page of items matching ``q`` whose key is above ``q.after`` (at most ``q.limit``;
    an ``offset:`` token of earlier versions skips that many matches instead).

    ``matched`` counts every match (all pages).
    """
    after = q.after
    conds, args = _where(q)
    where = " AND ".join(conds) or "1"
    sql = f"SELECT key, collection, doc FROM items WHERE {where}"
    if q.intersects is None:
        matched = db.execute(f"SELECT count(*) FROM items WHERE {where}", args).fetchone()[0]
        rows = db.execute(f"{sql} AND key > ? ORDER BY key LIMIT ? OFFSET ?",
                          [*args, after, q.limit + 1, q.offset]).fetchall()  # fmt: skip
        page = [(k, c, json.loads(d)) for k, c, d in rows]
    else:
        # the geometry test is shapely's: count and page over the bbox candidates
        matched, page = 0, []
        for k, c, d in db.execute(f"{sql} ORDER BY key", args):
            doc = json.loads(d)
            if not _intersects(q, doc):
                continue
            matched += 1
            if k > after and matched > q.offset and len(page) <= q.limit:
                page.append((k, c, doc))
    more = len(page) > q.limit
    page = page[: q.limit]
    return Page(page, int(matched), page[-1][0] if more else None)


def find_item(db: sqlite3.Connection, collection: str, item_id: str) -> dict[str, Any] | None:
    """One item's document by collection and id (an index lookup), or None."""
    row = db.execute("SELECT doc FROM items WHERE collection = ? AND id = ? ORDER BY key LIMIT 1",
                     (collection, item_id)).fetchone()  # fmt: skip
    return None if row is None else dict(json.loads(row[0]))

