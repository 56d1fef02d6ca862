"""STAC catalog of indexed granules, offline validation, item search, opening items.

* :func:`build_catalog` -- ``h5sidecar catalog DEST -o STACDIR``: one STAC Item per granule
  (footprint and time range read from the data, properties from global attributes, assets for
  the original file, the sidecar and the gateway's Zarr store) in a Collection, also written as
  stac-geoparquet; re-runs touch only what changed (item database ``STACDIR/_items.sqlite``);
* :func:`validate_document` / :func:`validate_tree` -- validation against the STAC JSON schemas
  shipped in the package (no network);
* :func:`open_item` -- an Item (object, dict, file or URL) -> :class:`xarray.Dataset`, or a
  Collection -> its datacube (cubes are Collection assets, see ``_cube_assets``);
* :class:`StacApi` / :func:`search_items` -- the framework-free core of the gateway's
  ``/stac/`` routes (STAC API item search over the item database: bbox, datetime, ids,
  collections, intersects, limit, cursor paging).
* :func:`load_pgstac` / :class:`PgStacApi` -- the same catalog loaded into, and searched in,
  pgstac (PostgreSQL + PostGIS).

Names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from h5sidecar._lazy import lazy_exports

__all__ = [
    "CatalogResult",
    "GranuleExtent",
    "ItemError",
    "NoFootprint",
    "PgStacApi",
    "STACValidationError",
    "StacApi",
    "build_catalog",
    "granule_extent",
    "list_indexed",
    "load_pgstac",
    "open_item",
    "search_items",
    "validate_document",
    "validate_tree",
]

_LAZY = {
    "CatalogResult": "_build",
    "ItemError": "_build",
    "NoFootprint": "_build",
    "build_catalog": "_build",
    "list_indexed": "_build",
    "GranuleExtent": "extent._granule_extent",
    "granule_extent": "extent._granule_extent",
    "STACValidationError": "_validate",
    "validate_document": "_validate",
    "validate_tree": "_validate",
    "open_item": "_open_item",
    "StacApi": "search._static_api",
    "search_items": "search._static_api",
    "PgStacApi": "pgstac._pgstac_api",
    "load_pgstac": "pgstac._pgstac_load",
    # for h5sidecar's own layers (served by the front, not advertised in __all__):
    "backend_dsn": "h5sidecar.catalog.pgstac._pgstac_api",
}


if TYPE_CHECKING:  # the names as type checkers see them; at run time each loads on first use
    from h5sidecar.catalog._build import CatalogResult as CatalogResult
    from h5sidecar.catalog._build import ItemError as ItemError
    from h5sidecar.catalog._build import NoFootprint as NoFootprint
    from h5sidecar.catalog._build import build_catalog as build_catalog
    from h5sidecar.catalog._build import list_indexed as list_indexed
    from h5sidecar.catalog._open_item import open_item as open_item
    from h5sidecar.catalog._validate import STACValidationError as STACValidationError
    from h5sidecar.catalog._validate import validate_document as validate_document
    from h5sidecar.catalog._validate import validate_tree as validate_tree
    from h5sidecar.catalog.extent._granule_extent import GranuleExtent as GranuleExtent
    from h5sidecar.catalog.extent._granule_extent import granule_extent as granule_extent
    from h5sidecar.catalog.pgstac._pgstac_api import PgStacApi as PgStacApi
    from h5sidecar.catalog.pgstac._pgstac_api import backend_dsn as backend_dsn
    from h5sidecar.catalog.pgstac._pgstac_load import load_pgstac as load_pgstac
    from h5sidecar.catalog.search._static_api import StacApi as StacApi
    from h5sidecar.catalog.search._static_api import search_items as search_items


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

