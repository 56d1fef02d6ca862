"""One STAC Item per indexed granule: geometry, time, properties and assets.

Assets:

``data``
    The original HDF5/netCDF-4 object (``application/x-hdf5``, roles ``["data"]``).
``references``
    The sidecar.  Kerchunk JSON: ``application/json`` with roles ``["references", "index"]``
    (what xpystac recognises as kerchunk references).  Kerchunk Parquet directory:
    ``application/vnd.apache.parquet`` with roles ``["references", "kerchunk-parquet"]`` (no
    standard media type names a *directory* of Parquet reference files; the role says how to read
    it: ``fsspec.filesystem("reference", fo=href)`` or :func:`h5sidecar.open_item`).  A compact
    Parquet sidecar, which plain kerchunk/fsspec cannot read, has roles ``["references",
    "h5sidecar-compact"]`` instead and says so in its title: open it with
    :func:`h5sidecar.open_item` or through the ``zarr`` asset.
``zarr``
    With a gateway URL: the granule as a Zarr v2 store served by ``h5sidecar serve``
    (``application/vnd+zarr``, roles ``["data", "zarr"]``).

Sizes are given with the File extension (``file:size``; a Parquet sidecar's size is the sum of its
files).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from typing import Any

from h5sidecar.catalog.extent._granule_extent import GranuleExtent
from h5sidecar.catalog.extent._time_range import parse_iso
from h5sidecar.dest import GranuleInfo
from h5sidecar.references import GranuleRefs

__all__ = [
    "FILE_EXTENSION",
    "XARRAY_EXTENSION",
    "HDF5_MEDIA_TYPE",
    "PARQUET_MEDIA_TYPE",
    "REFERENCES_OPEN_KWARGS",
    "ZARR_MEDIA_TYPE",
    "ZARR_OPEN_KWARGS",
    "build_item",
    "item_id",
]

FILE_EXTENSION = "https://stac-extensions.github.io/file/v2.1.0/schema.json"
#: The xarray-assets extension: how to open an asset with xarray (what xpystac applies).
XARRAY_EXTENSION = "https://stac-extensions.github.io/xarray-assets/v1.0.0/schema.json"
HDF5_MEDIA_TYPE = "application/x-hdf5"
JSON_MEDIA_TYPE = "application/json"
PARQUET_MEDIA_TYPE = "application/vnd.apache.parquet"
ZARR_MEDIA_TYPE = "application/vnd+zarr"
REFERENCE_ROLES = {"json": ["references", "index"], "parquet": ["references", "kerchunk-parquet"]}
#: Roles of a compact Parquet sidecar: no ``kerchunk-parquet`` (plain tools cannot read it).
COMPACT_ROLES = ["references", "h5sidecar-compact"]
#: xarray-assets open options of a sidecar or cube: our engine, which the base install registers
#: and which reads JSON, kerchunk Parquet and compact Parquet alike (kerchunk's engine is not
#: installed by any extra; ``chunks={}`` would need Dask).  No storage options: where the
#: object store is, and its credentials, are the reader's (``xr.open_dataset(href, **open_kwargs,
#: storage_options={**asset_options, "endpoint_url": ...})``).
REFERENCES_OPEN_KWARGS: dict[str, Any] = {"engine": "h5sidecar"}
#: xarray-assets open options of the gateway's Zarr v2 store (no ``chunks``: Dask is an extra).
ZARR_OPEN_KWARGS: dict[str, Any] = {"engine": "zarr", "consolidated": True}

#: Global attributes copied into ``h5sidecar:attributes`` are scalars no longer than this.
_MAX_ATTR_CHARS = 300
#: Extensions granule files commonly carry (removed to form the item id).
_DATA_SUFFIX = re.compile(r"\.(h5|hdf5|he5|hdf|nc|nc4|h5nc)$", re.IGNORECASE)


def item_id(name: str) -> str:
    """Item id of a granule name: data suffix dropped, path separators replaced by ``_``."""
    return _DATA_SUFFIX.sub("", name).replace("/", "_") or name


def _rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _head(text: Any) -> str | None:
    """``"ICESat-2 > Ice, Cloud, ..."`` -> ``"icesat-2"`` (GCMD-style keyword's short name)."""
    if not isinstance(text, str) or not text.strip():
        return None
    return text.split(">")[0].strip().lower() or None


def _scalar_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        number = isinstance(value, bool | int | float) and math.isfinite(value)  # JSON has no NaN
        if number or (isinstance(value, str) and len(value) <= _MAX_ATTR_CHARS):
            out[key] = value
    return out


def _properties(refs: GranuleRefs, ext: GranuleExtent, info: GranuleInfo) -> dict[str, Any]:
    attrs = refs.groups.get("", {})
    props: dict[str, Any] = {"title": info.name}
    description = attrs.get("description") or attrs.get("summary") or attrs.get("title")
    if isinstance(description, str) and description.strip():
        props["description"] = description.strip()
    platform = _head(attrs.get("platform"))
    if platform:
        props["platform"] = platform
    instruments = [h for h in (_head(s) for s in str(attrs.get("instrument", "")).split(",")) if h]
    if instruments:
        props["instruments"] = instruments
    created = parse_iso(attrs.get("date_created"))
    if created is not None:
        props["created"] = _rfc3339(created)
    statuses = [a.status for a in refs.arrays.values()]
    props["h5sidecar:variables"] = {
        "virtual": statuses.count("virtual"),
        "inlined": statuses.count("inlined"),
        "skipped": len(refs.skipped),
    }
    props["h5sidecar:footprint_from"] = list(ext.space_from)
    if ext.footprint is None:  # said in the item too: bbox and intersects searches miss it
        props["h5sidecar:no_footprint"] = ext.no_footprint
    props["h5sidecar:time_from"] = ext.time_from
    props["h5sidecar:attributes"] = _scalar_attrs(attrs)
    return props


def _assets(
    refs: GranuleRefs,
    info: GranuleInfo,
    *,
    gateway_url: str | None,
    references_href: str,
) -> dict[str, dict[str, Any]]:
    assets: dict[str, dict[str, Any]] = {
        "data": {
            "href": refs.source.url,
            "type": HDF5_MEDIA_TYPE,
            "title": "Original HDF5 granule",
            "roles": ["data"],
            "file:size": int(refs.source.size),
        },
        "references": {
            "href": references_href,
            "type": JSON_MEDIA_TYPE if info.format == "json" else PARQUET_MEDIA_TYPE,
            "title": f"Kerchunk references ({'JSON v1' if info.format == 'json' else 'Parquet'})",
            "roles": list(REFERENCE_ROLES[info.format]),
            "file:size": int(info.sidecar_bytes),
            # xarray-assets: xr.open_dataset(href, **open_kwargs, storage_options=...) reads it
            "xarray:open_kwargs": dict(REFERENCES_OPEN_KWARGS),
            "xarray:storage_options": {},
        },
    }
    if info.format == "parquet" and info.layout == "compact":
        assets["references"]["title"] = (
            "h5sidecar references (compact Parquet: read with h5sidecar, or use the zarr "
            "asset; plain kerchunk/fsspec cannot read it)"
        )
        assets["references"]["roles"] = list(COMPACT_ROLES)
    if gateway_url:
        assets["zarr"] = {
            "href": f"{gateway_url.rstrip('/')}/zarr/{info.name}/",
            "type": ZARR_MEDIA_TYPE,
            "title": "Zarr v2 store served by the h5sidecar gateway",
            "roles": ["data", "zarr"],
            "xarray:open_kwargs": dict(ZARR_OPEN_KWARGS),
        }
    return assets


def build_item(
    refs: GranuleRefs,
    ext: GranuleExtent,
    info: GranuleInfo,
    *,
    gateway_url: str | None = None,
    references_href: str | None = None,
) -> dict[str, Any]:
    """The STAC Item (a JSON-ready dict) of one granule.

    Parameters
    ----------
    refs : GranuleRefs
    ext : GranuleExtent
        Footprint and time range (``ext.start`` must not be None).
    info : GranuleInfo
    gateway_url : str, optional
        Base URL of ``h5sidecar serve``; adds the ``zarr`` asset.
    references_href : str, optional
        Where readers find the sidecar (default: ``info.sidecar``).
    """
    assert ext.start is not None and ext.end is not None
    props = _properties(refs, ext, info)
    props["datetime"] = None
    props["start_datetime"] = _rfc3339(ext.start)
    props["end_datetime"] = _rfc3339(ext.end)
    item: dict[str, Any] = {
        "type": "Feature",
        "stac_version": "1.1.0",
        "stac_extensions": [FILE_EXTENSION, XARRAY_EXTENSION],
        "id": item_id(info.name),
        "geometry": None if ext.footprint is None else ext.footprint.geometry,
        "properties": props,
        "links": [],
        "assets": _assets(refs, info, gateway_url=gateway_url,
                          references_href=references_href or info.sidecar),
    }
    if ext.footprint is not None:
        item["bbox"] = ext.footprint.bbox
    return item
