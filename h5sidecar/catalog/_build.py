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
import datetime as dt
import json
import logging
import os
import posixpath
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import fsspec

from h5sidecar._credentials import fsspec_options
from h5sidecar.catalog._cube_assets import XARRAY_EXTENSION, cube_assets
from h5sidecar.catalog._extent import granule_extent
from h5sidecar.catalog._item import FILE_EXTENSION, GranuleInfo, build_item
from h5sidecar.catalog._union import union_bbox
from h5sidecar.catalog._validate import validate_tree
from h5sidecar.errors import ErrorKind, H5SidecarError, InvalidRequestError
from h5sidecar.read._cube import cube_names, is_cube
from h5sidecar.references import GranuleRefs, read_layout, read_refs

__all__ = ["ItemError", "CatalogResult", "NoFootprint", "build_catalog", "list_indexed"]

log = logging.getLogger("h5sidecar.catalog")

REPORT_NAME = "_report.json"
#: The record of a local DEST, which replaces its report there (an SQLite database; its schema
#: is in :mod:`h5sidecar.workflows._record_db`, above this package).
RECORD_NAME = "_h5sidecar.sqlite"
ROOT_ID = "h5sidecar"
_SUFFIXES = {".parq": "parquet", ".json": "json"}
_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


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
        Paths of the item documents written.
    errors : tuple of ItemError
        Granules left out.
    cubes : tuple of str
        Names of the datacubes given as collection assets.
    no_footprint : tuple of NoFootprint
        Items written without a geometry (neither coordinates nor ACDD bounds give one).
    """

    catalog: str
    collection: str
    collection_id: str
    items: tuple[str, ...]
    errors: tuple[ItemError, ...] = field(default=())
    cubes: tuple[str, ...] = field(default=())
    no_footprint: tuple[NoFootprint, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True when every granule got an item."""
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"catalog": self.catalog, "collection": self.collection,
                "collection_id": self.collection_id, "items": list(self.items),
                "errors": [e.to_dict() for e in self.errors], "cubes": list(self.cubes),
                "no_footprint": [n.to_dict() for n in self.no_footprint]}


def _fs(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    fs, path = fsspec.core.url_to_fs(url, **fsspec_options(url, storage_options))
    return fs, path.rstrip("/")


def _join(dest: str, rel: str) -> str:
    return f"{dest.rstrip('/')}/{rel}"


def _size(fs: Any, path: str) -> int:
    return int(fs.du(path, total=True)) if fs.isdir(path) else int(fs.size(path))


def _failed_in_record(path: str) -> set[str]:
    """Names of the granules the record at ``path`` marks as failed."""
    db = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=60.0)
    try:
        return {n for (n,) in db.execute("SELECT name FROM granules WHERE status = 'failed'")}
    finally:
        db.close()


def list_indexed(
    dest: str, *, storage_options: Mapping[str, Any] | None = None, sizes: bool = True
) -> list[GranuleInfo]:
    """The sidecars under DEST (local folder or ``s3://`` prefix), sorted by granule name.

    Granules the last run report marks as failed are left out; sidecars are found by listing, so
    a DEST written by several runs (or by hand) is covered too.  ``sizes=False`` leaves
    ``sidecar_bytes`` at -1: sizing a Parquet sidecar walks its folder, a third of a 365-granule
    cube build's time for a number the build does not use.
    """
    fs, root = _fs(dest, storage_options)
    remote = "://" in dest
    prefix = dest.split("://", 1)[0] + "://" if remote else ""
    failed: set[str] = set()
    report = f"{root}/{REPORT_NAME}"
    if not remote and os.path.exists(f"{root}/{RECORD_NAME}"):
        failed = _failed_in_record(f"{root}/{RECORD_NAME}")
    elif fs.exists(report):
        with fs.open(report, "rb") as f:
            doc = json.load(f)
        failed = {g.get("name", "") for g in doc.get("granules", []) if g.get("status") == "failed"}
    out: list[GranuleInfo] = []
    for path in _walk(fs, root):
        rel = posixpath.relpath(path, root)
        suffix = posixpath.splitext(rel)[1]
        name = rel[: -len(suffix)]
        if name in failed:
            continue
        url = prefix + path if remote else path
        out.append(GranuleInfo(name=name, sidecar=url, format=_SUFFIXES[suffix],  # type: ignore[arg-type]
                               sidecar_bytes=_size(fs, path) if sizes else -1))
    return sorted(out, key=lambda g: g.name)


def _walk(fs: Any, root: str, depth: int = 0) -> list[str]:
    """Paths of the sidecars below ``root`` (hidden names skipped)."""
    found = []
    for entry in fs.ls(root, detail=True):
        path = entry["name"].rstrip("/")
        base = posixpath.basename(path)
        if base.startswith((".", "_")):
            continue
        suffix = posixpath.splitext(base)[1]
        is_dir = entry["type"] == "directory"
        if (suffix == ".parq" and is_dir) or (suffix == ".json" and not is_dir):
            found.append(path)
        elif is_dir and depth < 8:
            found.extend(_walk(fs, path, depth + 1))
    return found


def _collection_id(dest: str, items: list[dict[str, Any]]) -> str:
    names = {str(i["properties"]["h5sidecar:attributes"].get("short_name", "")) for i in items}
    if len(names) == 1 and "" not in names:
        return _ID_CHARS.sub("-", names.pop().lower())
    return _ID_CHARS.sub("-", posixpath.basename(dest.rstrip("/")) or "granules")


def _temporal(items: list[dict[str, Any]]) -> list[dt.datetime | None]:
    starts = [_parse(i["properties"]["start_datetime"]) for i in items]
    ends = [_parse(i["properties"]["end_datetime"]) for i in items]
    return [min(starts), max(ends)] if items else [None, None]


def _parse(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


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
        fs, path = _fs(url, storage_options)
        if "://" not in url:
            url = os.path.abspath(url)
        fmt = "parquet" if fs.isdir(path) else "json"
        refs = read_refs(url, storage_options=dict(storage_options or {}) or None)
        if not is_cube(refs):
            raise InvalidRequestError(
                f"{url} is a granule's sidecar, not a datacube: build one with "
                "`h5sidecar cube DEST -o CUBE`")
        out.append((GranuleInfo(name, url, fmt, _size(fs, path)), refs))  # type: ignore[arg-type]
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
) -> CatalogResult:
    """Write (or update) a static STAC catalog with one Item per granule indexed under DEST.

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
        Validate every written document against the STAC schemas (offline).
    progress : callable, optional
        Called with ``(granule name, ok)`` after each granule.
    cubes : mapping or sequence, optional
        Datacubes (``h5sidecar cube``) to add as Collection assets: name -> URL, or
        ``"[NAME=]PATH"`` strings (named after the file by default, as ``h5sidecar serve
        --cube`` names them).  Cubes written inside DEST are found by themselves (named by
        their path in DEST) and are not catalogued as Items.  See
        :mod:`h5sidecar.catalog._cube_assets` for the assets.

    Returns
    -------
    CatalogResult

    Raises
    ------
    SourceNotFoundError
        When DEST holds no sidecar.
    pystac.errors.STACValidationError
        When ``validate`` and a document does not validate (a bug: please report it).
    """
    import pystac

    from h5sidecar.errors import SourceNotFoundError

    granules = list_indexed(dest, storage_options=storage_options)
    if not granules:
        raise SourceNotFoundError(
            f"no sidecar under {dest}: index granules first (h5sidecar index SOURCE -o {dest})")
    items: list[dict[str, Any]] = []
    errors: list[ItemError] = []
    unlocated: list[NoFootprint] = []
    given = _given_cubes(cubes, storage_options)
    found: list[tuple[GranuleInfo, GranuleRefs]] = []
    for g in granules:
        res = _catalogue_one(g, dest=dest, gateway_url=gateway_url,
                             references_base_url=references_base_url,
                             storage_options=storage_options)
        if isinstance(res, GranuleRefs):
            found.append((g, res))
        elif isinstance(res, ItemError):
            # info, not warning: the result's errors carry it, and the CLI prints them once
            log.info("%s left out of the catalog: %s", g.name, res.message)
            errors.append(res)
        else:
            items.append(res)
            if res["geometry"] is None:
                why = res["properties"].get("h5sidecar:no_footprint", "")
                log.info("%s has no footprint: %s", g.name, why)
                unlocated.append(NoFootprint(g.name, why))
        if progress is not None:
            progress(g.name, not isinstance(res, ItemError))
    cid = collection_id or _collection_id(dest, items)
    root_dir = Path(stacdir).resolve()
    root_dir.mkdir(parents=True, exist_ok=True)
    root_href = root_dir / "catalog.json"
    if root_href.exists():
        root = pystac.Catalog.from_file(str(root_href))
        if root.get_child(cid) is not None:
            root.remove_child(cid)
    else:
        root = pystac.Catalog(id=ROOT_ID, description="Granules indexed by h5sidecar",
                              title="h5sidecar catalog")
    bboxes: list[list[float]] = [i["bbox"] for i in items if "bbox" in i]
    collection = pystac.Collection(
        id=cid,
        title=title or cid,
        description=description or f"Granules indexed by h5sidecar under {dest}",
        extent=pystac.Extent(
            pystac.SpatialExtent([union_bbox(bboxes) if bboxes else [-180.0, -90.0, 180.0, 90.0]]),
            pystac.TemporalExtent([_temporal(items)]),
        ),
        license="other",
        stac_extensions=[],
    )
    for doc in items:
        collection.add_item(pystac.Item.from_dict(doc, preserve_dict=False))
    cube_keys = _add_cubes(collection, given, found, dest=dest, gateway_url=gateway_url,
                           references_base_url=references_base_url)  # fmt: skip
    root.add_child(collection)
    root.normalize_hrefs(str(root_dir))
    root.save(catalog_type=pystac.CatalogType.SELF_CONTAINED)
    item_paths = tuple(str(Path(i.get_self_href() or "")) for i in collection.get_items())
    coll_path = str(collection.get_self_href())
    if validate:
        validate_tree(str(root_href))
    return CatalogResult(str(root_href), coll_path, cid, item_paths, tuple(errors), cube_keys,
                         tuple(unlocated))


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
