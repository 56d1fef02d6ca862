"""A collection's items as stac-geoparquet (stac-geoparquet spec 1.1.0 over GeoParquet 1.1).

One row per item: ``type``, ``stac_version``, ``stac_extensions``, ``id``, ``geometry`` (WKB),
``bbox`` (a struct ``xmin, ymin, xmax, ymax``, declared as the geometry's bbox covering),
``links``, ``assets`` (structs, as in JSON), ``collection``, and every property as a top-level
column; ``datetime``, ``start_datetime``, ``end_datetime`` and ``created`` are timestamps (UTC,
microseconds).  ``h5sidecar:attributes`` (the granule's global attributes, which differ in
names and types between products) and the assets' ``xarray:open_kwargs`` and
``xarray:storage_options`` (free-form maps; an empty one, ``{}``, has no Parquet form) are kept as
JSON text.  The file metadata holds GeoParquet's
``geo`` key and the ``stac-geoparquet`` key with the collection document.

Written in row groups of :data:`ROW_GROUP` items from a stream of documents: the schema is
gathered in a first pass (each batch's inferred schema unified), rows converted in a second,
so memory holds one batch whatever the number of items.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["ROW_GROUP", "STAC_GEOPARQUET_VERSION", "file_metadata", "items_table",
           "write_geoparquet"]

ROW_GROUP = 5000
STAC_GEOPARQUET_VERSION = "1.1.0"
_TIMES = ("datetime", "start_datetime", "end_datetime", "created")
_AS_JSON = ("h5sidecar:attributes",)
#: Free-form keyword maps of the xarray-assets extension (``{}``: Parquet has no
#: empty struct, and ``null`` would mean something else to xarray).
_ASSET_JSON = ("xarray:open_kwargs", "xarray:storage_options")


def _asset(asset: Mapping[str, Any], light: bool = False) -> dict[str, Any]:
    return {k: ("" if light else json.dumps(v, separators=(",", ":"))) if k in _ASSET_JSON
            else v for k, v in asset.items()}  # fmt: skip


def _time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    t = dt.datetime.fromisoformat(text)
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def _row(doc: Mapping[str, Any], collection: str, *, light: bool = False) -> dict[str, Any]:
    """The item as a row; ``light`` (for the schema pass) leaves out what does not change the
    schema and costs most: the WKB geometry and the JSON texts (their types are fixed)."""
    import shapely
    from shapely.geometry import shape

    geom = doc.get("geometry")
    bbox = doc.get("bbox")
    row: dict[str, Any] = {
        "type": doc.get("type", "Feature"),
        "stac_version": doc.get("stac_version"),
        "stac_extensions": list(doc.get("stac_extensions", [])),
        "id": doc["id"],
        "geometry": shapely.to_wkb(shape(geom)) if geom and not light else None,
        "bbox": None if not bbox else dict(zip(("xmin", "ymin", "xmax", "ymax"),
                                               [float(v) for v in bbox[:4]], strict=True)),
        "links": [{k: v for k, v in lk.items() if k in ("href", "rel", "type", "title")}
                  for lk in doc.get("links", [])],
        "assets": {k: _asset(a, light) for k, a in doc.get("assets", {}).items()},
        "collection": collection,
    }  # fmt: skip
    for key, value in doc.get("properties", {}).items():
        if key in _TIMES:
            row[key] = _time(value)
        elif key in _AS_JSON:
            row[key] = "" if light else json.dumps(value, separators=(",", ":"))
        else:
            row[key] = value
    return row


def _batches(
    docs: Iterable[Mapping[str, Any]], collection: str, types: set[str] | None = None
) -> Iterator[list[dict[str, Any]]]:
    """Rows in batches of :data:`ROW_GROUP`.  With ``types`` (the schema pass), light rows, and
    the geometry types seen are added to it."""
    batch: list[dict[str, Any]] = []
    for doc in docs:
        if types is not None and doc.get("geometry"):
            types.add(str(doc["geometry"]["type"]))
        batch.append(_row(doc, collection, light=types is not None))
        if len(batch) >= ROW_GROUP:
            yield batch
            batch = []
    if batch:
        yield batch


def _inferred(batch: list[dict[str, Any]]) -> Any:
    """The schema of a batch of rows: of every key of every row (``pa.Table.from_pylist``
    infers the columns from the first row alone, and would drop a property its item lacks)."""
    import pyarrow as pa

    keys = dict.fromkeys(k for row in batch for k in row)
    return pa.Table.from_pydict({k: [row.get(k) for row in batch] for k in keys}).schema


def _fixed(schema: Any) -> Any:
    """The unified schema with the columns whose type the spec fixes."""
    import pyarrow as pa

    fixed = {
        "geometry": pa.binary(),
        "bbox": pa.struct([(k, pa.float64()) for k in ("xmin", "ymin", "xmax", "ymax")]),
        **{k: pa.timestamp("us", tz="UTC") for k in _TIMES},
    }
    fields = [pa.field(f.name, fixed.get(f.name, f.type)) for f in schema]
    names = {f.name for f in fields}
    fields += [pa.field(k, t) for k, t in fixed.items() if k in ("datetime",) and k not in names]
    return pa.schema(fields)


def write_geoparquet(
    path: Path,
    docs: Callable[[], Iterable[Mapping[str, Any]]] | Iterable[Mapping[str, Any]],
    collection: str,
    collection_doc: Mapping[str, Any],
) -> Path:
    """Write the items as stac-geoparquet at ``path`` (atomically: temp file + rename).

    ``docs`` is read twice when it is a callable returning a fresh iterable (schema, then rows);
    an iterable is read once into memory.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    source: Callable[[], Iterable[Mapping[str, Any]]]
    if callable(docs):
        source = docs
    else:
        held = list(docs)
        source = lambda: held
    types: set[str] = set()
    schemas = [_inferred(b) for b in _batches(source(), collection, types)]
    if not schemas:
        return path
    schema = _fixed(pa.unify_schemas(schemas, promote_options="permissive"))
    geo = _geo_metadata(sorted(types))
    meta = {b"geo": json.dumps(geo).encode(),
            b"stac-geoparquet": json.dumps({"version": STAC_GEOPARQUET_VERSION,
                                            "collections": {collection: collection_doc}}).encode()}
    schema = schema.with_metadata(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        for batch in _batches(source(), collection):
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    tmp.replace(path)
    return path


def infer_schema(docs: Iterable[Mapping[str, Any]], collection: str,
                 base: Any = None) -> tuple[Any, set[str]]:  # fmt: skip
    """The schema of the items' rows (unified with ``base``, a schema, when given; the spec's
    fixed column types) and the geometry types seen: the first of two passes, on light rows.
    None for the schema when there are no items and no ``base``."""
    import pyarrow as pa

    types: set[str] = set()
    schemas = [_inferred(b) for b in _batches(docs, collection, types)]
    if base is not None:
        schemas.insert(0, base)
    if not schemas:
        return None, types
    return _fixed(pa.unify_schemas(schemas, promote_options="permissive")), types


def items_table(docs: Iterable[Mapping[str, Any]], collection: str, schema: Any) -> Any:
    """The items as one Arrow table of ``schema`` (from :func:`infer_schema`), converted in
    batches of :data:`ROW_GROUP` (so that many are held as Python rows at once)."""
    import pyarrow as pa

    tables = [pa.Table.from_pylist(b, schema=schema) for b in _batches(docs, collection)]
    return pa.concat_tables(tables) if tables else schema.empty_table()


def file_metadata(types: Iterable[str], collection: str,
                  collection_doc: Mapping[str, Any]) -> dict[bytes, bytes]:
    """The Parquet file metadata of stac-geoparquet: ``geo`` and ``stac-geoparquet``."""
    return {b"geo": json.dumps(_geo_metadata(sorted(types))).encode(),
            b"stac-geoparquet": json.dumps({"version": STAC_GEOPARQUET_VERSION,
                                            "collections": {collection: collection_doc}}).encode()}


def _geo_metadata(types: list[str]) -> dict[str, Any]:
    """GeoParquet 1.1's ``geo`` key: WKB geometry in OGC:CRS84, its types, the bbox covering."""
    return {
        "version": "1.1.0",
        "primary_column": "geometry",
        "columns": {"geometry": {
            "encoding": "WKB",
            "geometry_types": types,
            "covering": {"bbox": {k: ["bbox", k] for k in ("xmin", "ymin", "xmax", "ymax")}},
        }},
    }  # fmt: skip
