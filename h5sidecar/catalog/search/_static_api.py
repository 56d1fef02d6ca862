"""A minimal STAC API over a static catalog folder: landing page, collections, items, search.

Framework-free: :class:`StacApi` answers with JSON-ready dicts and raises
:class:`~h5sidecar.errors.InvalidRequestError` (HTTP 400) for malformed parameters and
:class:`~h5sidecar.errors.NotIndexedError` (HTTP 404) for unknown collections or items; the
gateway's ``/stac/`` routes only translate HTTP to these calls.  Conformance: STAC API Core,
Item Search (``bbox``, ``intersects``, ``datetime``, ``ids``, ``collections``, ``limit``, cursor paging, by GET
or POST) and Collections/Features (browsing).

Items are searched in the catalog's item database (``STACDIR/_items.sqlite``, written by
``h5sidecar catalog``; an R-tree over space and time, keyset paging, see :mod:`._item_query`),
never all held in memory; the links of every answer are absolute, built from the request's
base URL.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from h5sidecar.catalog._item_db import DB_NAME, SCHEMA, load_tree
from h5sidecar.catalog.search._item_query import COUNT_LIMIT, find_item, search_page
from h5sidecar.catalog.search._params import SearchParams, parse_search
from h5sidecar.errors import NotIndexedError, require_extra

__all__ = ["CONFORMANCE", "StacApi", "search_items"]

CONFORMANCE = [
    "https://api.stacspec.org/v1.0.0/core",
    "https://api.stacspec.org/v1.0.0/item-search",
    "https://api.stacspec.org/v1.0.0/collections",
    "https://api.stacspec.org/v1.0.0/ogcapi-features",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/core",
    "http://www.opengis.net/spec/ogcapi-features-1/1.0/conf/geojson",
]
GEOJSON = "application/geo+json"
JSON = "application/json"


@dataclass(frozen=True)
class _Entry:
    doc: dict[str, Any]
    collection: str
    bbox: tuple[float, float, float, float] | None
    start: dt.datetime | None
    end: dt.datetime | None

    @functools.cached_property
    def geometry(self) -> Any:
        """The item's footprint as a shapely geometry (None without one), built when first
        searched with ``intersects``."""
        from shapely.geometry import shape

        geom = self.doc.get("geometry")
        return None if not geom else shape(geom)


def _time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    return dt.datetime.fromisoformat(text)


def _entry(doc: dict[str, Any], collection: str) -> _Entry:
    props = doc.get("properties", {})
    start = _time(props.get("start_datetime")) or _time(props.get("datetime"))
    end = _time(props.get("end_datetime")) or _time(props.get("datetime"))
    bbox = doc.get("bbox")
    box = None
    if bbox:
        w, s, e, n = (bbox[0], bbox[1], bbox[3], bbox[4]) if len(bbox) == 6 else bbox
        box = (float(w), float(s), float(e), float(n))
    return _Entry(doc, collection, box, start, end)


def _lon_spans(w: float, e: float) -> list[tuple[float, float]]:
    """A box's longitude range as one or two plain intervals (crossing boxes have w > e)."""
    return [(w, e)] if w <= e else [(w, 180.0), (-180.0, e)]


def _boxes_intersect(a: Sequence[float], b: Sequence[float]) -> bool:
    if a[1] > b[3] or b[1] > a[3]:
        return False
    return any(
        x0 <= y1 and y0 <= x1
        for x0, x1 in _lon_spans(a[0], a[2])
        for y0, y1 in _lon_spans(b[0], b[2])
    )


def _matches(e: _Entry, q: SearchParams) -> bool:
    if q.ids is not None and e.doc["id"] not in q.ids:
        return False
    if q.collections is not None and e.collection not in q.collections:
        return False
    if q.bbox is not None and (e.bbox is None or not _boxes_intersect(e.bbox, q.bbox)):
        return False
    if q.intersects is not None:
        # the boxes first (cheap); then the footprint itself, planar in lon/lat (footprints
        # crossing the antimeridian are split at +/-180, so planar is right)
        if e.bbox is None or not _boxes_intersect(e.bbox, q.intersects.bounds):
            return False
        if e.geometry is None or not q.intersects.intersects(e.geometry):
            return False
    if q.start is not None and (e.end is None or e.end < q.start):
        return False
    return not (q.end is not None and (e.start is None or e.start > q.end))


def search_items(
    items: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The items (STAC Item dicts) matching STAC API search ``params`` (no paging).

    ``params`` is a query-string mapping (``bbox="w,s,e,n"``, ``datetime="a/b"``,
    ``ids="x,y"``) or a POST body (lists).  An item whose bbox crosses the antimeridian
    (west > east) matches boxes on either side.
    """
    q = parse_search(params)
    out = []
    for doc in items:
        e = _entry(dict(doc), str(doc.get("collection", "")))
        if _matches(e, q):
            out.append(doc)
    return out


class StacApi:
    """STAC API answers over the catalog written by ``h5sidecar catalog`` (see module docs).

    Items are not held in memory: they are searched in the catalog's item database
    (``STACDIR/_items.sqlite``, see :mod:`._item_db`), opened read-only; a catalog folder
    without one (written by hand or by an earlier version) is loaded once into an in-memory
    database.  Every method may be called from any thread (one connection per thread).

    Parameters
    ----------
    stacdir : str or Path
        Folder holding ``catalog.json``.
    count_limit : int
        ``numberMatched`` is given when a search has at most this many candidates, and left
        out above (a count would read every match: see :mod:`._item_query`).
    """

    def __init__(self, stacdir: str | Path, *, count_limit: int = COUNT_LIMIT) -> None:
        require_extra("catalog", "shapely", feature="the STAC API (serve --stac)")
        self.count_limit = count_limit
        self.root_dir = Path(stacdir).resolve()
        root_file = self.root_dir / "catalog.json"
        if not root_file.is_file():
            raise NotIndexedError(
                f"no catalog.json in {stacdir}: write one with "
                "`h5sidecar catalog DEST -o STACDIR`")
        self.root = json.loads(root_file.read_text("utf-8"))
        self._local = threading.local()
        self._keeper: sqlite3.Connection | None = None
        db_path = self.root_dir / DB_NAME
        if db_path.is_file():
            self._uri = f"file:{quote(str(db_path))}?mode=ro"
            self.collections = self._read_collections()
        else:
            # shared in-memory database: every thread's connection sees the one loaded here
            self._uri = f"file:h5sidecar-stac-{id(self)}?mode=memory&cache=shared"
            self._keeper = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            self._keeper.executescript(SCHEMA)
            self.collections = load_tree(self._keeper, self.root_dir, self.root)

    def _read_collections(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for link in self.root.get("links", []):
            if link.get("rel") == "child":
                coll = json.loads((self.root_dir / link["href"]).read_text("utf-8"))
                if coll.get("type") == "Collection":
                    out[coll["id"]] = coll
        return out

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self._uri, uri=True, check_same_thread=False, timeout=30.0)
            db.execute("PRAGMA query_only = 1")
            self._local.db = db
        return db

    # -- documents ------------------------------------------------------------------------------
    def landing(self, base: str) -> dict[str, Any]:
        """The landing page (root catalog with conformance and search links)."""
        base = base.rstrip("/")
        links = landing_links(base, ((cid, c.get("title", cid))
                                     for cid, c in self.collections.items()))
        return {
            "type": "Catalog",
            "stac_version": self.root.get("stac_version", "1.1.0"),
            "id": self.root.get("id", "h5sidecar"),
            "title": self.root.get("title", "h5sidecar catalog"),
            "description": self.root.get("description", ""),
            "conformsTo": list(CONFORMANCE),
            "links": links,
        }

    def conformance(self) -> dict[str, Any]:
        """The conformance classes."""
        return {"conformsTo": list(CONFORMANCE)}

    def _collection_doc(self, cid: str, base: str) -> dict[str, Any]:
        doc = {k: v for k, v in self.collections[cid].items() if k != "links"}
        doc["links"] = collection_links(base, cid)
        return doc

    def collection(self, cid: str, base: str) -> dict[str, Any]:
        """One collection (``NotIndexedError`` when unknown)."""
        self._check_collection(cid)
        return self._collection_doc(cid, base.rstrip("/"))

    def list_collections(self, base: str) -> dict[str, Any]:
        """Every collection."""
        base = base.rstrip("/")
        return {
            "collections": [self._collection_doc(cid, base) for cid in self.collections],
            "links": [{"rel": "self", "href": f"{base}/collections", "type": JSON},
                      {"rel": "root", "href": f"{base}/", "type": JSON}],
        }

    def _check_collection(self, cid: str) -> None:
        if cid not in self.collections:
            raise NotIndexedError(
                f"no collection {cid!r} in the catalog (collections: "
                f"{', '.join(self.collections) or 'none'})")

    def item(self, cid: str, item_id: str, base: str) -> dict[str, Any]:
        """One item with absolute links (``NotIndexedError`` when unknown)."""
        self._check_collection(cid)
        doc = find_item(self._db(), cid, item_id)
        if doc is None:
            raise NotIndexedError(f"no item {item_id!r} in collection {cid!r}")
        return self._item_doc(doc, cid, base.rstrip("/"))

    def _item_doc(self, item: dict[str, Any], cid: str, base: str) -> dict[str, Any]:
        doc = {k: v for k, v in item.items() if k != "links"}
        coll = f"{base}/collections/{cid}"
        doc["collection"] = cid
        doc["links"] = [
            {"rel": "self", "href": f"{coll}/items/{item['id']}", "type": GEOJSON},
            {"rel": "parent", "href": coll, "type": JSON},
            {"rel": "collection", "href": coll, "type": JSON},
            {"rel": "root", "href": f"{base}/", "type": JSON},
        ]
        return doc

    # -- search ---------------------------------------------------------------------------------
    def search(
        self,
        params: Mapping[str, Any],
        base: str,
        *,
        method: str = "GET",
        collection: str | None = None,
    ) -> dict[str, Any]:
        """A page of matching items as a GeoJSON FeatureCollection with a ``next`` link.

        Parameters
        ----------
        params : mapping
            Query parameters (GET) or the JSON body (POST): ``bbox``, ``intersects`` (GeoJSON),
            ``datetime``, ``ids``, ``collections``, ``limit`` (1-10000, default 10), ``token`` (from a ``next`` link).
        base : str
            Base URL of the API (``http://host/stac``) for links.
        method : "GET" or "POST"
            How the ``next`` link repeats the request.
        collection : str, optional
            Restrict to one collection (the ``/collections/{id}/items`` route).

        Raises
        ------
        InvalidRequestError
            Malformed parameters (HTTP 400).
        NotIndexedError
            Unknown ``collection`` (HTTP 404).
        """
        base = base.rstrip("/")
        q = parse_search(params)
        if collection is not None:
            self._check_collection(collection)
            q = q.restricted_to(collection)
        page = search_page(self._db(), q, count_limit=self.count_limit)
        self_href = f"{base}/collections/{collection}/items" if collection else f"{base}/search"
        links: list[dict[str, Any]] = [{"rel": "root", "href": f"{base}/", "type": JSON}]
        if page.next_key is not None:
            links.append(next_link(self_href, params, method, f"next:{page.next_key}"))
        out: dict[str, Any] = {
            "type": "FeatureCollection",
            "features": [self._item_doc(doc, cid, base) for _, cid, doc in page.rows],
            "links": links,
            "numberReturned": len(page.rows),
        }
        if page.matched is not None:  # optional in STAC API: left out of broad searches
            out["numberMatched"] = page.matched
        return out

    def static_file(self, rel: str) -> bytes:
        """A file of the catalog folder by relative path (never outside it).

        Raises
        ------
        NotIndexedError
            When the path is outside the folder, hidden, not JSON or missing.
        """
        target = (self.root_dir / rel).resolve()
        if (
            not target.is_relative_to(self.root_dir)
            or target.suffix != ".json"
            or any(p.startswith(".") for p in target.relative_to(self.root_dir).parts)
            or not target.is_file()
        ):
            raise NotIndexedError(f"no catalog file {rel!r}")
        return target.read_bytes()


def landing_links(base: str, children: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """The links of a STAC API landing page at ``base``, with a ``child`` link per
    ``(collection id, title)`` (shared by every backend)."""
    links = [
        {"rel": "self", "href": f"{base}/", "type": JSON},
        {"rel": "root", "href": f"{base}/", "type": JSON},
        {"rel": "conformance", "href": f"{base}/conformance", "type": JSON},
        {"rel": "data", "href": f"{base}/collections", "type": JSON},
        {"rel": "search", "href": f"{base}/search", "type": GEOJSON, "method": "GET"},
        {"rel": "search", "href": f"{base}/search", "type": GEOJSON, "method": "POST"},
    ]
    return links + [{"rel": "child", "href": f"{base}/collections/{cid}", "type": JSON,
                     "title": title} for cid, title in children]


def collection_links(base: str, cid: str) -> list[dict[str, Any]]:
    """The links of collection ``cid`` served at ``base`` (shared by every backend)."""
    return [
        {"rel": "self", "href": f"{base}/collections/{cid}", "type": JSON},
        {"rel": "root", "href": f"{base}/", "type": JSON},
        {"rel": "parent", "href": f"{base}/", "type": JSON},
        {"rel": "items", "href": f"{base}/collections/{cid}/items", "type": GEOJSON},
    ]


def next_link(href: str, params: Mapping[str, Any], method: str, token: str) -> dict[str, Any]:
    """The ``next`` link of a search page: the same search with ``token`` (shared by every
    backend; each has its own token format)."""
    if method.upper() == "POST":
        body = {k: v for k, v in params.items() if k != "token"}
        body["token"] = token
        return {"rel": "next", "href": href, "type": GEOJSON, "method": "POST", "body": body,
                "merge": False}
    query = {k: v for k, v in params.items() if k != "token"}
    query["token"] = token
    flat = {k: ",".join(map(str, v)) if isinstance(v, list | tuple) else v
            for k, v in query.items()}
    return {"rel": "next", "href": f"{href}?{urlencode(flat)}", "type": GEOJSON, "method": "GET"}
