"""``open_item``: from a STAC Item (a granule) or Collection (its datacube) of the catalog to an
xarray Dataset (or DataTree)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from h5sidecar.catalog._cube_assets import CUBE_ROLE
from h5sidecar.errors import InvalidReferenceError

__all__ = ["default_asset", "item_asset_href", "load_item", "open_item"]


def load_item(
    item: Any, *, storage_options: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], str | None]:
    """An Item (or Collection) as a dict plus the href it came from (for relative asset hrefs).

    ``item`` is a :class:`pystac.Item` or :class:`pystac.Collection`, a dict, or the path/URL of
    an Item or Collection JSON document (local, ``http(s)://``, ``s3://``; ``storage_options``
    apply to fsspec).
    """
    if isinstance(item, Mapping):
        return dict(item), None
    if hasattr(item, "to_dict") and hasattr(item, "assets"):  # pystac.Item or Collection
        return item.to_dict(include_self_link=False, transform_hrefs=False), item.get_self_href()
    if isinstance(item, str | os.PathLike):
        import fsspec

        href = os.fspath(item)
        opts = dict(storage_options or {}) if href.startswith("s3://") else {}
        with fsspec.open(href, "rb", **opts) as f:
            doc = json.load(f)
        if doc.get("type") not in ("Feature", "Collection"):
            raise InvalidReferenceError(
                f"{href} is not a STAC Item or Collection (type {doc.get('type')!r}): pass an "
                "item document, e.g. <catalog>/<collection>/<item>/<item>.json, or a "
                "collection.json")
        return doc, href
    raise TypeError(f"open_item needs a pystac.Item, dict, path or URL, not {type(item).__name__}")


def item_asset_href(doc: Mapping[str, Any], asset: str, base: str | None = None) -> str:
    """Absolute href of ``asset`` of an Item dict (relative hrefs resolved against ``base``).

    Raises
    ------
    InvalidReferenceError
        When the item has no such asset.
    """
    assets = doc.get("assets", {})
    if asset not in assets:
        raise InvalidReferenceError(
            f"{_kind(doc)} {doc.get('id')!r} has no {asset!r} asset (it has: "
            f"{', '.join(assets) or 'none'}): build the catalog with `h5sidecar catalog DEST -o "
            "STACDIR` (add --gateway-url for 'zarr' assets, --cube for datacubes)")
    href = str(assets[asset]["href"])
    if base and "://" not in href and not os.path.isabs(href):
        import posixpath

        if "://" in base:
            scheme, rest = base.split("://", 1)
            href = f"{scheme}://{posixpath.normpath(posixpath.join(posixpath.dirname(rest), href))}"
        else:
            href = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(base)), href))
    return href


def _kind(doc: Mapping[str, Any]) -> str:
    return "collection" if doc.get("type") == "Collection" else "item"


def default_asset(doc: Mapping[str, Any]) -> str:
    """The asset ``open_item`` opens by default: an Item's ``references``; a Collection's only
    datacube references asset (role ``datacube``).

    Raises
    ------
    InvalidReferenceError
        A Collection with no datacube, or several (name one with ``asset=``).
    """
    if doc.get("type") != "Collection":
        return "references"
    cubes = [k for k, a in doc.get("assets", {}).items()
             if {CUBE_ROLE, "references"} <= set(a.get("roles") or ())]  # fmt: skip
    if len(cubes) != 1:
        raise InvalidReferenceError(
            f"collection {doc.get('id')!r} has {len(cubes)} datacube assets "
            f"({', '.join(cubes) or 'none'}): "
            + ("pass asset=NAME" if cubes else "add one with `h5sidecar catalog DEST -o "
               "STACDIR --cube CUBE`, or open its items")
        )
    return cubes[0]


def open_item(
    item: Any,
    group: str | None = None,
    *,
    asset: str | None = None,
    datatree: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """Open a granule of the catalog from its STAC Item, or a datacube from its Collection.

    Parameters
    ----------
    item : pystac.Item, pystac.Collection, dict, str or path-like
        The Item or Collection, or the path/URL of its JSON document.
    group : str, optional
        Group to open (``"gt1l/heights"``); the root group by default.
    asset : str, optional
        Which asset to open.  Items: ``"references"`` (default; JSON or Parquet sidecar, read
        with the ``h5sidecar`` engine) or ``"zarr"`` (the gateway's Zarr v2 store, read with
        xarray's zarr engine).  Collections: a datacube's references, ``NAME`` (default: the
        only one; read with the ``h5sidecar`` engine, which checks every member), or its
        gateway store, ``NAME-zarr``.
    datatree : bool
        Return every group as an :class:`xarray.DataTree` instead (``group`` then selects a
        subtree).
    storage_options : mapping, optional
        fsspec options for the sidecar and the source (e.g. an S3 endpoint), and for reading
        the Item itself from ``s3://``.
    **kwargs
        Passed to :func:`h5sidecar.open_dataset` (``chunks``, decoding options) or, for the
        ``zarr`` asset, to :func:`xarray.open_dataset`.

    Returns
    -------
    xarray.Dataset or xarray.DataTree

    Examples
    --------
    >>> ds = h5sidecar.open_item("stac/atl03/ATL03_x/ATL03_x.json", group="gt1l/heights")  # doctest: +SKIP
    """
    doc, base = load_item(item, storage_options=storage_options)
    asset = default_asset(doc) if asset is None else asset
    href = item_asset_href(doc, asset, base)
    roles = set(doc["assets"][asset].get("roles") or ())
    if "references" in roles:
        from h5sidecar.read import open_dataset, open_datatree

        opts = {"storage_options": dict(storage_options)} if storage_options else {}
        if datatree:
            tree = open_datatree(href, **opts, **kwargs)
            return tree[group] if group else tree
        return open_dataset(href, group=group, **opts, **kwargs)
    import xarray as xr

    # the asset's own open options (xarray Assets extension), then the caller's
    kwargs = {"chunks": {}, **dict(doc["assets"][asset].get("xarray:open_kwargs") or {}),
              **kwargs}  # fmt: skip
    kwargs.pop("engine", None)
    if datatree:
        return xr.open_datatree(href, engine="zarr", group=group, **kwargs)
    return xr.open_dataset(href, engine="zarr", group=group, **kwargs)
