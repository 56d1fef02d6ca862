"""STAC API item search as SQL over the item database (:mod:`._item_db`).

The exact conditions (the same as :func:`h5sidecar.catalog.search_items`: boxes crossing the
antimeridian match on either side, an item's time range must overlap the interval) are tested on
the ``items`` columns; pages follow the integer ``key`` (keyset: ``key > last``, so a page costs
the same wherever it is and stays stable while items are added).  ``intersects`` is tested with
shapely on the candidates of its bounding box.

A search first takes its candidates from the narrowest index it has (the ids, a small
collection, or the R-tree over space and time), at most ``count_limit`` + 1 of them: when they
are fewer, every match is known, ``matched`` is exact and the page is cut from them.  When
there are more, the search is broad, and counting its matches would read all of them (a search
matching all of 100,000 items took ~240 ms, all in its count); so, as pgstac does with
``context`` off or above its thresholds, the count is left out (``matched`` is None: optional
in STAC API) and the page is read in key order with the exact conditions, stopping at the
page's end.  Broad matches are dense, so few rows are read; matches all lying at the end of
the key order cost the rows before them.  A search costs at most ``count_limit`` candidates
(at 1,000,000 items, ~1-12 ms whatever it matches: benchmarks/README.md).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from h5sidecar.catalog._item_db import OPEN, spans_of
from h5sidecar.catalog.search._params import SearchParams

__all__ = ["COUNT_LIMIT", "Page", "find_item", "search_page"]

#: Matches counted exactly (``numberMatched``) at most; above, a search leaves the count out.
COUNT_LIMIT = 5_000
_CHUNK = 500  # keys per ``IN (...)`` statement


@dataclass(frozen=True)
class Page:
    """One page of a search: ``(key, collection, doc)`` rows, the total (None when more than
    the count limit match), the next cursor."""

    rows: list[tuple[int, str, dict[str, Any]]]
    matched: int | None
    next_key: int | None


def _box(q: SearchParams) -> tuple[float, float, float, float] | None:
    if q.bbox is not None:
        return q.bbox
    return None if q.intersects is None else tuple(q.intersects.bounds)


def _tree(q: SearchParams) -> tuple[str, list[Any]] | None:
    """The R-tree condition (on ``items_rtree``) of the bbox and datetime, or None."""
    box = _box(q)
    if box is None and q.start is None and q.end is None:
        return None
    t0 = -OPEN if q.start is None else q.start.timestamp()
    t1 = OPEN if q.end is None else q.end.timestamp()
    if box is None:
        spans, lat = [(-OPEN, OPEN)], (-OPEN, OPEN)
    else:
        spans, lat = spans_of(box[0], box[2]), (box[1], box[3])
    tree = " OR ".join(["(maxx >= ? AND minx <= ?)"] * len(spans))
    return (f"({tree}) AND maxy >= ? AND miny <= ? AND maxt >= ? AND mint <= ?",
            [v for a, b in spans for v in (a, b)] + [*lat, t0, t1])  # fmt: skip


def _where(q: SearchParams, *, indexed: bool = True) -> tuple[list[str], list[Any]]:
    """The exact SQL conditions (and their parameters) of everything but ``intersects`` and
    paging: complete without the R-tree, which only finds candidates.  ``indexed=False``
    keeps SQLite off the id and collection indexes (``+column``), for a scan in key order."""
    plus = "" if indexed else "+"
    conds: list[str] = []
    args: list[Any] = []
    box = _box(q)
    if q.start is not None:
        conds.append('"end" >= ?')
        args.append(q.start.timestamp())
    if q.end is not None:
        conds.append("start <= ?")
        args.append(q.end.timestamp())
    if box is not None:
        # exact: what the R-tree's 32-bit floats only approximate (see _search._boxes_intersect)
        spans = spans_of(box[0], box[2])
        lon = " OR ".join(["((w <= e AND w <= ? AND ? <= e) OR (w > e AND (w <= ? OR ? <= e)))"]
                          * len(spans))  # fmt: skip
        conds.append(f"s IS NOT NULL AND s <= ? AND n >= ? AND ({lon})")
        args += [box[3], box[1]] + [v for a, b in spans for v in (b, a, b, a)]
    if q.ids is not None:
        conds.append(f"{plus}id IN ({','.join('?' * len(q.ids))})")
        args += sorted(q.ids)
    if q.collections is not None:
        conds.append(f"{plus}collection IN ({','.join('?' * len(q.collections))})")
        args += sorted(q.collections)
    return conds, args


def _in_list(values: Iterable[str]) -> tuple[str, list[str]]:
    vals = sorted(values)
    return f"({','.join('?' * len(vals))})", vals


def _known_matches(db: sqlite3.Connection, q: SearchParams, limit: int) -> list[int] | None:
    """The keys matching ``q`` (but for ``intersects``'s geometry test), in order, when the
    narrowest index gives at most ``limit`` candidates; None when it gives more (broad)."""
    drivers: list[tuple[str, list[Any]]] = []
    if q.ids is not None:
        sql, vals = _in_list(q.ids)
        drivers.append((f"SELECT key FROM items WHERE id IN {sql}", vals))
    if q.collections is not None:
        sql, vals = _in_list(q.collections)
        drivers.append((f"SELECT key FROM items WHERE collection IN {sql}", vals))
    tree = _tree(q)
    if tree is not None:
        # the key from the entry id (2*key or 2*key+1): the auxiliary ``key`` column is read
        # from a side table, row by row (4x slower over 10,000 entries)
        drivers.append((f"SELECT rid >> 1 FROM items_rtree WHERE {tree[0]}", tree[1]))
    if not drivers:
        drivers.append(("SELECT key FROM items", []))
    conds, args = _where(q)
    where = " AND ".join(conds) or "1"
    for sql, dargs in drivers:
        # one pass over the index, stopped past the limit: a broad search costs limit + 1 keys
        keys = db.execute(f"{sql} LIMIT ?", [*dargs, limit + 1]).fetchall()
        if len(keys) > limit:
            continue
        out: list[int] = []  # (an antimeridian box's two R-tree entries give one key: a set)
        for part in _chunks(sorted({k for (k,) in keys})):
            out += [k for (k,) in db.execute(
                f"SELECT key FROM items WHERE key IN ({','.join('?' * len(part))}) AND {where} "
                "ORDER BY key", [*part, *args])]  # fmt: skip
        return out
    return None


def _chunks(keys: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(keys), _CHUNK):
        yield keys[i : i + _CHUNK]


def _intersects(q: SearchParams, doc: dict[str, Any]) -> bool:
    from shapely.geometry import shape

    geom = doc.get("geometry")
    return bool(geom) and q.intersects.intersects(shape(geom))


def _known_page(q: SearchParams, db: sqlite3.Connection, matches: list[int]) -> Page:
    """The page when every match is known: count them, cut the page."""
    docs: dict[int, tuple[str, dict[str, Any]]] = {}
    if q.intersects is not None:  # the geometry test is shapely's: on every candidate
        kept = []
        for part in _chunks(matches):
            for k, c, d in _rows(db, part):
                doc = json.loads(d)
                if _intersects(q, doc):
                    kept.append(k)
                    docs[k] = (c, doc)
        matches = kept
    wanted = [k for k in matches if k > q.after][q.offset : q.offset + q.limit + 1]
    for k, c, d in _rows(db, [k for k in wanted if k not in docs]):
        docs[k] = (c, json.loads(d))
    more = len(wanted) > q.limit
    page = [(k, *docs[k]) for k in wanted[: q.limit]]
    return Page(page, len(matches), page[-1][0] if more else None)


def _rows(db: sqlite3.Connection, keys: list[int]) -> list[tuple[int, str, str]]:
    if not keys:
        return []
    rows = db.execute(f"SELECT key, collection, doc FROM items WHERE key IN "
                      f"({','.join('?' * len(keys))}) ORDER BY key", keys).fetchall()  # fmt: skip
    return [(int(k), str(c), str(d)) for k, c, d in rows]


def _broad_page(db: sqlite3.Connection, q: SearchParams) -> Page:
    """The page of a broad search: rows in key order with the exact conditions, until the page
    is full (no count)."""
    # broad: the matches are many, so reading in key order finds a page sooner than an index
    # of a large collection would, read whole and sorted
    conds, args = _where(q, indexed=False)
    where = " AND ".join(conds) or "1"
    sql = f"SELECT key, collection, doc FROM items WHERE {where} AND key > ? ORDER BY key"
    page: list[tuple[int, str, dict[str, Any]]] = []
    if q.intersects is None:
        rows = db.execute(f"{sql} LIMIT ? OFFSET ?",
                          [*args, q.after, q.limit + 1, q.offset]).fetchall()  # fmt: skip
        page = [(k, c, json.loads(d)) for k, c, d in rows]
    else:
        skipped = 0
        for k, c, d in db.execute(sql, [*args, q.after]):
            doc = json.loads(d)
            if not _intersects(q, doc):
                continue
            if skipped < q.offset:
                skipped += 1
                continue
            page.append((k, c, doc))
            if len(page) > q.limit:
                break
    more = len(page) > q.limit
    page = page[: q.limit]
    return Page(page, None, page[-1][0] if more else None)


def search_page(db: sqlite3.Connection, q: SearchParams, *, count_limit: int = COUNT_LIMIT) -> Page:
    """The page of items matching ``q`` whose key is above ``q.after`` (at most ``q.limit``;
    an ``offset:`` token of earlier versions skips that many matches instead).

    ``matched`` counts every match (all pages) when the search has at most ``count_limit``
    candidates, and is None otherwise (see the module's docs).
    """
    matches = _known_matches(db, q, count_limit)
    return _broad_page(db, q) if matches is None else _known_page(q, db, matches)


def find_item(db: sqlite3.Connection, collection: str, item_id: str) -> dict[str, Any] | None:
    """One item's document by collection and id (an index lookup), or None."""
    row = db.execute("SELECT doc FROM items WHERE collection = ? AND id = ? ORDER BY key LIMIT 1",
                     (collection, item_id)).fetchone()  # fmt: skip
    return None if row is None else dict(json.loads(row[0]))
