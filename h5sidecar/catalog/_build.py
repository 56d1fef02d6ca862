"""``h5sidecar catalog DEST -o STACDIR``: a static STAC 1.1 catalog of the granules under DEST.

Layout written (relative links only, so the folder can be copied or served anywhere)::

    STACDIR/catalog.json                               root Catalog (kept across runs)
    STACDIR/<collection>/collection.json               one Collection per DEST
    STACDIR/<collection>/<item>/<item>.json            one Item per indexed granule

Datacubes (``h5sidecar cube``) are Collection assets, not Items (:mod:`._cube_assets`): those
written inside DEST are found by listing it, others are named by the caller (``cubes=``).

Re-running replaces the collection of the same id and keeps the others.  A granule that cannot be
catalogued (unreadable sidecar, no time information) is left out and reported with the reason; a
granule catalogued without a footprint (no coordinates nor ACDD bounds give one) is reported
with the reason too, as bbox searches cannot find it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from h5sidecar.catalog._cube_assets import XARRAY_EXTENSION, cube_assets
from h5sidecar.catalog._extent import granule_extent
from h5sidecar.catalog._item import FILE_EXTENSION, GranuleInfo, build_item
from h5sidecar.catalog._item_db import DB_NAME, connect
from h5sidecar.catalog._listing import dest_fs, list_indexed, sidecar_size
from h5sidecar.errors import ErrorKind, H5SidecarError, InvalidRequestError
from h5sidecar.read._cube import cube_names, is_cube
from h5sidecar.references import GranuleRefs, read_layout, read_refs

__all__ = ["ItemError", "CatalogResult", "NoFootprint", "build_catalog", "list_indexed"]

log = logging.getLogger("h5sidecar.catalog")

ROOT_ID = "h5sidecar"
#: Collections of at most this many items are also written as a static JSON tree (one document
#: per item, linked from the collection); larger ones only as stac-geoparquet and in the item
#: database the STAC API searches.
JSON_TREE_MAX_ITEMS = 10_000


@dataclass(frozen=True)
class ItemError:
    """A granule left out of the catalog: which, why, and what to do."""

    name: str
    sidecar: str
    kind: str
    message: str
    hint: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"name": self.name, "sidecar": self.sidecar, "kind": self.kind,
                "message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class NoFootprint:
    """A granule catalogued without a geometry (spatial searches cannot find it), and why."""

    name: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class CatalogResult:
    """Outcome of :func:`build_catalog`.

    Attributes
    ----------
    catalog : str
        Path of the root ``catalog.json``.
    collection : str
        Path of the collection document.
    collection_id : str
    items : tuple of str
        Paths of the collection's item documents (empty when the JSON tree holds no items).
    errors : tuple of ItemError
        Granules left out.
    cubes : tuple of str
        Names of the datacubes given as collection assets.
    no_footprint : tuple of NoFootprint
        Items written without a geometry (neither coordinates nor ACDD bounds give one).
    added, updated, removed, unchanged : int
        Sidecars catalogued for the first time, catalogued again (changed since the last run),
        gone since the last run, and left as they were (not read).
    geoparquet : str
        Path of the collection's stac-geoparquet file (``""`` when not written).
    """

    catalog: str
    collection: str
    collection_id: str
    items: tuple[str, ...]
    errors: tuple[ItemError, ...] = field(default=())
    cubes: tuple[str, ...] = field(default=())
    no_footprint: tuple[NoFootprint, ...] = field(default=())
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0
    geoparquet: str = ""

    @property
    def ok(self) -> bool:
        """True when every granule got an item."""
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"catalog": self.catalog, "collection": self.collection,
                "collection_id": self.collection_id, "items": list(self.items),
                "errors": [e.to_dict() for e in self.errors], "cubes": list(self.cubes),
                "no_footprint": [n.to_dict() for n in self.no_footprint],
                "added": self.added, "updated": self.updated, "removed": self.removed,
                "unchanged": self.unchanged, "geoparquet": self.geoparquet}


def _published(sidecar: str, dest: str, references_base_url: str | None) -> str | None:
    """Where a sidecar under DEST is published (``references_base_url`` + its relative path)."""
    if not references_base_url:
        return None
    rel = posixpath.relpath(sidecar.split("://", 1)[-1], dest.split("://", 1)[-1])
    return f"{references_base_url.rstrip('/')}/{rel}"


def _catalogue_one(
    g: GranuleInfo,
    *,
    dest: str,
    gateway_url: str | None,
    references_base_url: str | None,
    storage_options: Mapping[str, Any] | None,
) -> dict[str, Any] | ItemError | GranuleRefs:
    """The granule's Item, why it is left out, or the references of a cube found in DEST."""
    try:
        refs = read_refs(g.sidecar, storage_options=dict(storage_options or {}) or None)
        if is_cube(refs):
            return refs
        if g.format == "parquet":  # a compact sidecar's asset must not claim kerchunk
            layout = read_layout(g.sidecar, storage_options=dict(storage_options or {}) or None)
            g = dataclasses.replace(g, layout=layout or "kerchunk")
        ext = granule_extent(refs, storage_options=storage_options)
    except (H5SidecarError, OSError, ValueError) as exc:
        return ItemError(g.name, g.sidecar, getattr(exc, "kind", type(exc).__name__), str(exc),
                            "check the sidecar with `h5sidecar verify`, re-index the granule "
                            "(h5sidecar index --force), then re-run `h5sidecar catalog`")
    if ext.start is None:
        return ItemError(g.name, g.sidecar, ErrorKind.NO_TIME,
                            "no time information: no decodable CF time variable and no "
                            "time_coverage_start attribute",
                            "add time_coverage_start/end global attributes or a CF time "
                            "variable (units 'seconds since ...') to the product")
    href = _published(g.sidecar, dest, references_base_url)
    return build_item(refs, ext, g, gateway_url=gateway_url, references_href=href)


def _given_cubes(
    cubes: Mapping[str, str] | Sequence[str] | None, storage_options: Mapping[str, Any] | None
) -> list[tuple[GranuleInfo, GranuleRefs]]:
    """The cubes named by the caller, read (each must be a cube)."""
    out = []
    for name, url in cube_names(cubes).items():
        fs, path = dest_fs(url, storage_options)
        if "://" not in url:
            url = os.path.abspath(url)
        fmt = "parquet" if fs.isdir(path) else "json"
        refs = read_refs(url, storage_options=dict(storage_options or {}) or None)
        if not is_cube(refs):
            raise InvalidRequestError(
                f"{url} is a granule's sidecar, not a datacube: build one with "
                "`h5sidecar cube DEST -o CUBE`")
        out.append((GranuleInfo(name, url, fmt, sidecar_size(fs, path)), refs))  # type: ignore[arg-type]
    return out


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
        Write the collection's items as stac-geoparquet (``<collection>/items.parquet``),
        rewritten when an item of the collection changed.

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
    root_dir = Path(stacdir).resolve()
    root_dir.mkdir(parents=True, exist_ok=True)
    given = _given_cubes(cubes, storage_options)
    from h5sidecar.catalog._run import Run

    db = connect(root_dir / DB_NAME)
    try:
        run = Run(db, root_dir, dest, gateway_url=gateway_url,
                   references_base_url=references_base_url, storage_options=storage_options)
        return run.build(collection_id=collection_id, title=title, description=description,
                         validate=validate, progress=progress, given=given,
                         json_tree=json_tree, geoparquet=geoparquet)
    finally:
        db.close()

def _add_cubes(
    collection: Any,
    given: list[tuple[GranuleInfo, GranuleRefs]],
    found: list[tuple[GranuleInfo, GranuleRefs]],
    *,
    dest: str,
    gateway_url: str | None,
    references_base_url: str | None,
) -> tuple[str, ...]:
    """Add each cube's assets to the collection (a cube given by name is not added twice)."""
    import pystac

    given_urls = {g.sidecar for g, _ in given}
    cubes = [(g, r, g.sidecar) for g, r in given] + [
        (g, r, _published(g.sidecar, dest, references_base_url) or g.sidecar)
        for g, r in found if g.sidecar not in given_urls
    ]
    names: list[str] = []
    for g, refs, href in cubes:
        assets = cube_assets(g.name, refs, href=href, fmt=g.format,
                             size=g.sidecar_bytes, gateway_url=gateway_url)  # fmt: skip
        for key, asset in assets.items():
            if key in collection.assets:
                raise InvalidRequestError(f"two cubes are named {g.name!r}: name one with "
                                          "NAME=PATH")  # fmt: skip
            collection.add_asset(key, pystac.Asset.from_dict(asset))
        names.append(g.name)
    if names:
        collection.stac_extensions = [FILE_EXTENSION, XARRAY_EXTENSION]
    return tuple(names)
