"""``h5sidecar catalog DEST -o STACDIR``: a STAC 1.1 catalog of the granules under DEST.

Layout written (relative links only, so the folder can be copied or served anywhere)::

    STACDIR/catalog.json                               root Catalog (kept across runs)
    STACDIR/<collection>/collection.json               one Collection per DEST
    STACDIR/<collection>/<item>/<item>.json            one Item per indexed granule (JSON tree,
                                                       collections of at most 10,000 items)
    STACDIR/<collection>/items.parquet/part-*.parquet  every item, stac-geoparquet in parts
    STACDIR/_items.sqlite                              item database: incremental runs, search

Datacubes (``h5sidecar cube``) are Collection assets, not Items (:mod:`._cube_assets`): those
written inside DEST are found by listing it, others are named by the caller (``cubes=``).

Re-running updates the collection of the same id (only what changed, see :mod:`._run`) and
keeps the others.  A granule that cannot be catalogued (unreadable sidecar, no time
information) is left out and reported with the reason; a granule catalogued without a footprint
(no coordinates nor ACDD bounds give one) is reported with the reason too, as bbox searches
cannot find it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from h5sidecar.catalog._catalogue import given_cubes
from h5sidecar.catalog._item_db import DB_NAME, connect
from h5sidecar.catalog._result import CatalogResult, ItemError, NoFootprint
from h5sidecar.catalog._run import JSON_TREE_MAX_ITEMS, Run
from h5sidecar.dest import list_indexed
from h5sidecar.errors import require_extra
from h5sidecar.settings import RecordSettings

__all__ = [
    "JSON_TREE_MAX_ITEMS", "CatalogResult", "ItemError", "NoFootprint", "build_catalog",
    "list_indexed",
]  # fmt: skip


def build_catalog(
    dest: str,
    stacdir: str | Path,
    *,
    gateway_url: str | None = None,
    collection_id: str | None = None,
    references_base_url: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    title: str | None = None,
    description: str | None = None,
    validate: bool = True,
    progress: Callable[[str, bool], None] | None = None,
    cubes: Mapping[str, str] | Sequence[str] | None = None,
    json_tree: bool | None = None,
    geoparquet: bool = True,
    track_footprints: Literal["recorded", "read"] = "recorded",
    record_settings: RecordSettings | None = None,
) -> CatalogResult:
    """Write (or update) a STAC catalog with one Item per granule indexed under DEST.

    Incremental: the catalog folder's item database (``_items.sqlite``) records every
    catalogued sidecar with its identity, so a re-run reads only new or changed sidecars,
    removes the items of removed ones and rewrites only the documents that changed (a run that
    changed nothing writes nothing).  Memory does not grow with the number of granules: items
    are streamed to the database and read back from it in batches.

    Parameters
    ----------
    dest : str
        Folder or ``s3://`` prefix written by ``h5sidecar index -o``.
    stacdir : str or Path
        Local folder of the catalog (created; other collections in it are kept).
    gateway_url : str, optional
        Base URL of ``h5sidecar serve DEST``: adds a ``zarr`` asset to every item.
    collection_id : str, optional
        Default: the products' common ``short_name`` attribute, else DEST's folder name.
    references_base_url : str, optional
        URL at which DEST is published (static web server, S3 website): references assets
        then point there instead of at DEST itself.
    storage_options : mapping, optional
        fsspec options to read DEST and the granules (e.g. an S3 endpoint).
    title, description : str, optional
        Of the collection.
    validate : bool
        Validate the root and the collection, and one item of each document shape (see
        :class:`~h5sidecar.catalog._validate.ShapeValidator`), against the STAC schemas
        (offline).
    progress : callable, optional
        Called with ``(granule name, ok)`` after each granule read (not for unchanged ones).
    cubes : mapping or sequence, optional
        Datacubes (``h5sidecar cube``) to add as Collection assets: name -> URL, or
        ``"[NAME=]PATH"`` strings (named after the file by default, as ``h5sidecar serve
        --cube`` names them).  Cubes written inside DEST are found by themselves (named by
        their path in DEST) and are not catalogued as Items.  See
        :mod:`h5sidecar.catalog._cube_assets` for the assets.
    json_tree : bool, optional
        Write one JSON document per item, linked from the collection.  Default: when the
        collection has at most :data:`JSON_TREE_MAX_ITEMS` items.
    geoparquet : bool
        Write the collection's items as stac-geoparquet (``<collection>/items.parquet/``, a
        folder of parts; a run writes the parts of what changed, see
        :mod:`~h5sidecar.catalog.geoparquet._parts`).
    track_footprints : {"recorded", "read"}
        Along-track granules (ICESat-2-like): located from what the indexer recorded, or their
        ACDD attributes (a box; no source read), or ``"read"``: every track's positions are
        read for a polygon that follows them (changing it rebuilds the collection's items).
    record_settings : RecordSettings, optional
        The record cache an object-store DEST's record is read through (default:
        ``from_env(RecordSettings)``).

    Returns
    -------
    CatalogResult

    Raises
    ------
    SourceNotFoundError
        When DEST holds no sidecar.
    STACValidationError
        When ``validate`` and a document does not validate (a bug: please report it).
    """
    require_extra("catalog", "pystac", "jsonschema", "shapely", feature="a STAC catalog (h5sidecar catalog)")
    root_dir = Path(stacdir).resolve()
    root_dir.mkdir(parents=True, exist_ok=True)
    given = given_cubes(cubes, storage_options)
    db = connect(root_dir / DB_NAME)
    try:
        run = Run(db, root_dir, dest, gateway_url=gateway_url,
                   references_base_url=references_base_url, storage_options=storage_options,
                   track_footprints=track_footprints, record_settings=record_settings)
        return run.build(collection_id=collection_id, title=title, description=description,
                         validate=validate, progress=progress, given=given,
                         json_tree=json_tree, geoparquet=geoparquet)
    finally:
        db.close()
