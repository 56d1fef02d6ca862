"""The catalog in pgstac (PostgreSQL + PostGIS): the STAC API answered from it.

* :func:`~h5sidecar.catalog.pgstac._pgstac_load.load_pgstac` -- ``h5sidecar catalog ... --pgstac DSN``
  loads it (its own module);
* :class:`PgStacApi` -- ``h5sidecar serve --stac-backend pgstac:DSN``: the methods and answers of
  :class:`~h5sidecar.catalog.StacApi`, each a query of pgstac's SQL functions (``search``,
  ``get_item``, ``get_collection``, ``all_collections``).

Links are not stored: the static catalog's relative links mean nothing in a database, and every
answer builds absolute ones from the request's base URL.

An item without a footprint (``geometry: null``, valid STAC) is stored with an empty geometry
(:data:`NO_FOOTPRINT`): pgstac's ``items.geometry`` is ``NOT NULL``, and an empty geometry
intersects nothing, so bbox and intersects searches miss it (as in the embedded backend) while
datetime, ids and collection searches find it.  Answers give it back as ``null``.

Searches mean what they mean in the embedded backend, with one difference: pgstac matches ``bbox``
against each item's footprint (as the STAC API asks), the embedded backend against each item's
bbox, so a box that touches an item's bbox but not its footprint finds it only there.  Pages come
in pgstac's order (newest first) with pgstac's paging tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from h5sidecar.catalog.search._params import parse_search
from h5sidecar.catalog.search._static_api import (
    CONFORMANCE,
    GEOJSON,
    JSON,
    collection_links,
    landing_links,
    next_link,
)
from h5sidecar.errors import InvalidRequestError, NotIndexedError, SourceReadError, require_extra

__all__ = ["NO_FOOTPRINT", "PgStacApi", "backend_dsn", "pgstac_search_body"]

#: The geometry an item without a footprint is stored with (empty: no bbox or intersects search
#: finds it); answers give ``null`` back in its place.
NO_FOOTPRINT: dict[str, Any] = {"type": "GeometryCollection", "geometries": []}

#: What a pgstac paging token starts with (``next:<collection>:<item>``, ``prev:...``).
_TOKEN_PREFIXES = ("next:", "prev:")


def backend_dsn(spec: str) -> str:
    """The DSN of a ``--stac-backend pgstac:DSN`` option.

    Raises
    ------
    InvalidRequestError
        When the option does not name the pgstac backend or gives no DSN.
    """
    kind, _, dsn = spec.partition(":")
    if kind != "pgstac" or not dsn.strip():
        raise InvalidRequestError(
            f"--stac-backend {spec!r}: give pgstac:DSN, e.g. "
            "pgstac:postgresql://user@host:5432/dbname (or omit it and give --stac STACDIR)")
    return dsn.strip()


def _unreachable(dsn: str, exc: Exception) -> SourceReadError:
    from psycopg.conninfo import conninfo_to_dict

    try:  # the DSN without its password, if it holds one
        info = conninfo_to_dict(dsn)
        where = f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"
    except Exception:  # noqa: BLE001 -- a DSN psycopg cannot read is named as not readable
        where = "(unreadable DSN)"
    return SourceReadError(f"cannot use the pgstac database at {where}: {exc} (is PostgreSQL "
                           "running there, and pgstac installed with `pypgstac migrate`?)")


def _unlinked(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "links"}


class PgStacApi:
    """STAC API answers from pgstac, with :class:`~h5sidecar.catalog.StacApi`'s methods.

    Every method runs a query and blocks: the gateway calls them in a worker thread.

    Parameters
    ----------
    dsn : str
        libpq connection string of a database with pgstac installed.
    pool_size : int
        Most connections held open (one query each at a time).
    timeout : float
        Seconds to wait for a connection (the first, or a free one of the pool).
    context : {"on", "auto", "off"}
        pgstac's ``numberMatched``: exact (as the embedded backend), estimated from the
        planner's statistics above pgstac's thresholds (cheap on billions of items), or none.

    Raises
    ------
    SourceReadError
        When the database cannot be reached within ``timeout`` (here, and from every method:
        the gateway answers 502).
    """

    def __init__(self, dsn: str, *, pool_size: int = 4, timeout: float = 30.0,
                 context: str = "on") -> None:  # fmt: skip
        require_extra("pgstac", "psycopg", "psycopg_pool",
                      feature="a STAC API over pgstac (serve --stac-backend)")
        from psycopg_pool import ConnectionPool, PoolTimeout

        if context not in ("on", "auto", "off"):
            raise InvalidRequestError(f"context {context!r}: give 'on', 'auto' or 'off'")
        self.context = context

        # search_path per connection: pgstac's functions live in its own schema
        # check: a connection the server dropped (restart, idle timeout) is replaced before use
        self.pool = ConnectionPool(dsn, min_size=1, max_size=pool_size, open=False,
                                   check=ConnectionPool.check_connection,
                                   kwargs={"autocommit": True,
                                           "options": "-c search_path=pgstac,public"})  # fmt: skip
        self.timeout, self._dsn = timeout, dsn
        try:
            self.pool.open(wait=True, timeout=timeout)
        except PoolTimeout as exc:
            self.pool.close()
            raise _unreachable(dsn, exc) from exc

    def close(self) -> None:
        """Close the connections."""
        self.pool.close()

    def _one(self, sql: str, *args: Any) -> Any:
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            with self.pool.connection(timeout=self.timeout) as conn:
                row = conn.execute(sql, args).fetchone()
        except (psycopg.OperationalError, PoolTimeout) as exc:  # down, or every connection busy
            raise _unreachable(self._dsn, exc) from exc
        return None if row is None else row[0]

    # -- documents ------------------------------------------------------------------------------
    def _collections(self) -> list[dict[str, Any]]:
        found = self._one("SELECT all_collections()") or []
        return sorted(found, key=lambda c: c["id"])

    def landing(self, base: str) -> dict[str, Any]:
        """The landing page (root catalog with conformance and search links)."""
        base = base.rstrip("/")
        links = landing_links(base, ((c["id"], c.get("title", c["id"]))
                                     for c in self._collections()))
        return {"type": "Catalog", "stac_version": "1.1.0", "id": "h5sidecar",
                "title": "h5sidecar catalog", "description": "Granules indexed by h5sidecar",
                "conformsTo": list(CONFORMANCE), "links": links}  # fmt: skip

    def conformance(self) -> dict[str, Any]:
        """The conformance classes."""
        return {"conformsTo": list(CONFORMANCE)}

    @staticmethod
    def _collection_doc(coll: Mapping[str, Any], base: str) -> dict[str, Any]:
        cid = coll["id"]
        doc = _unlinked(coll)
        doc["links"] = collection_links(base, cid)
        return doc

    def _get_collection(self, cid: str) -> dict[str, Any]:
        coll = self._one("SELECT get_collection(%s)", cid)
        if coll is None:
            names = ", ".join(c["id"] for c in self._collections()) or "none"
            raise NotIndexedError(
                f"no collection {cid!r} in the catalog (collections: {names})")
        return dict(coll)

    def collection(self, cid: str, base: str) -> dict[str, Any]:
        """One collection (``NotIndexedError`` when unknown)."""
        return self._collection_doc(self._get_collection(cid), base.rstrip("/"))

    def list_collections(self, base: str) -> dict[str, Any]:
        """Every collection."""
        base = base.rstrip("/")
        return {
            "collections": [self._collection_doc(c, base) for c in self._collections()],
            "links": [{"rel": "self", "href": f"{base}/collections", "type": JSON},
                      {"rel": "root", "href": f"{base}/", "type": JSON}],
        }

    def item(self, cid: str, item_id: str, base: str) -> dict[str, Any]:
        """One item with absolute links (``NotIndexedError`` when unknown)."""
        self._get_collection(cid)
        doc = self._one("SELECT get_item(%s, %s)", item_id, cid)
        if doc is None:
            raise NotIndexedError(f"no item {item_id!r} in collection {cid!r}")
        return _item_doc(doc, base.rstrip("/"))

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

        Parameters and errors are those of :meth:`h5sidecar.catalog.StacApi.search`; the
        ``token`` is pgstac's (from a ``next`` link).
        """
        base = base.rstrip("/")
        if collection is not None:
            self._get_collection(collection)
        body = pgstac_search_body(params, collection=collection, context=self.context)
        import psycopg

        try:
            page = self._one("SELECT search(%s::jsonb)", json.dumps(body)) or {}
        except (psycopg.errors.RaiseException, psycopg.DataError) as exc:
            if "token" not in body:  # pgstac refuses only tokens it cannot read
                raise
            raise InvalidRequestError(f"token {body['token']!r} is not one this API issued "
                                      "(use 'next' links)") from exc  # fmt: skip
        self_href = f"{base}/collections/{collection}/items" if collection else f"{base}/search"
        links: list[dict[str, Any]] = [{"rel": "root", "href": f"{base}/", "type": JSON}]
        token = _next_token(page)
        if token is not None:
            links.append(next_link(self_href, params, method, token))
        features = [_item_doc(f, base) for f in page.get("features") or []]
        out = {"type": "FeatureCollection", "features": features, "links": links,
               "numberReturned": len(features)}  # fmt: skip
        if "numberMatched" in page:
            out["numberMatched"] = page["numberMatched"]
        return out

    def static_file(self, rel: str) -> bytes:
        """Always ``NotIndexedError``: a catalog in pgstac has no files to serve."""
        raise NotIndexedError(f"no catalog file {rel!r}: this catalog is served from pgstac "
                              "(browse /stac/collections instead)")  # fmt: skip


def pgstac_search_body(
    params: Mapping[str, Any], *, collection: str | None = None, context: str = "on"
) -> dict[str, Any]:
    """The body of pgstac's ``search()`` for STAC API search ``params`` (checked as the
    embedded backend checks them; the ``token`` must be one pgstac issued).  ``context`` is
    pgstac's setting for ``numberMatched``: ``on`` (exact count), ``auto`` (estimated above
    its thresholds) or ``off`` (none).

    A ``bbox`` crossing the antimeridian (west > east) becomes an ``intersects`` MultiPolygon of
    its two halves: pgstac reads a bbox as a plain envelope, west to east.
    """
    token = params.get("token")
    if token not in (None, "") and not str(token).startswith(_TOKEN_PREFIXES):
        raise InvalidRequestError(f"token {token!r} is not one this API issued (use 'next' links)")
    q = parse_search({k: v for k, v in params.items() if k != "token"})
    if collection is not None:
        q = q.restricted_to(collection)
    body: dict[str, Any] = {"limit": q.limit, "conf": {"context": context}}
    if token not in (None, ""):
        body["token"] = str(token)
    if q.ids is not None:
        body["ids"] = sorted(q.ids)
    if q.collections is not None:
        body["collections"] = sorted(q.collections)
    if q.bbox is not None:
        w, s, e, n = q.bbox
        if w <= e:
            body["bbox"] = [w, s, e, n]
        else:
            body["intersects"] = {"type": "MultiPolygon", "coordinates": [
                _box(w, s, 180.0, n), _box(-180.0, s, e, n)]}  # fmt: skip
    if q.intersects is not None:
        from shapely.geometry import mapping

        body["intersects"] = mapping(q.intersects)
    if q.start is not None or q.end is not None:
        body["datetime"] = f"{_iso(q.start)}/{_iso(q.end)}"
    return body


def _box(w: float, s: float, e: float, n: float) -> list[list[list[float]]]:
    return [[[w, s], [e, s], [e, n], [w, n], [w, s]]]


def _iso(t: Any) -> str:
    return ".." if t is None else str(t.isoformat())


def _next_token(page: Mapping[str, Any]) -> str | None:
    """The token of the ``next`` link pgstac's ``search()`` answered with (None on the last page)."""
    from urllib.parse import parse_qs, urlsplit

    for link in page.get("links") or []:
        if link.get("rel") == "next":
            found = parse_qs(urlsplit(link.get("href", "")).query).get("token")
            if found:
                return found[0]
    return None


def _item_doc(doc: Mapping[str, Any], base: str) -> dict[str, Any]:
    out = _unlinked(doc)
    props = out.get("properties")
    if isinstance(props, dict) and "datetime" not in props:
        # pgstac drops a null datetime; STAC requires the key (null with a start/end range)
        out["properties"] = {**props, "datetime": None}
    if out.get("geometry") == NO_FOOTPRINT:  # the stand-in of a null geometry (see the module)
        out["geometry"] = None
    cid = out["collection"]
    coll = f"{base}/collections/{cid}"
    out["links"] = [
        {"rel": "self", "href": f"{coll}/items/{out['id']}", "type": GEOJSON},
        {"rel": "parent", "href": coll, "type": JSON},
        {"rel": "collection", "href": coll, "type": JSON},
        {"rel": "root", "href": f"{base}/", "type": JSON},
    ]
    return out
