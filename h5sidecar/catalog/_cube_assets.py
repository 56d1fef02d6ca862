"""Collection-level assets of a datacube (``h5sidecar cube``): its references and its gateway store.

A cube is one Zarr store over a whole collection, so it belongs to the Collection, not to an
Item.  Each cube ``NAME`` gives up to two assets:

``NAME``
    The cube's kerchunk references (JSON: ``application/json``, roles ``references``, ``index``,
    ``datacube``; Parquet directory: ``application/vnd.apache.parquet``, roles ``references``,
    ``kerchunk-parquet``, ``datacube``), with the xarray Assets extension's open options:
    ``xarray:open_kwargs`` ``{"engine": "h5sidecar"}`` and ``xarray:storage_options`` ``{}``,
    so ``xr.open_dataset(href, **open_kwargs, storage_options=storage_options)`` reads it
    with the engine the base install registers (which checks every member's identity).
``NAME-zarr``
    With a gateway URL: ``URL/zarr/NAME/``, the cube as the gateway's Zarr v2 store
    (``application/vnd+zarr``, roles ``data``, ``zarr``, ``datacube``;
    ``xarray:open_kwargs`` ``{"engine": "zarr", "consolidated": true}``).

:func:`h5sidecar.open_item` opens either from the Collection.
"""

from __future__ import annotations

from typing import Any, Literal

from h5sidecar.catalog._item import (
    JSON_MEDIA_TYPE,
    PARQUET_MEDIA_TYPE,
    REFERENCE_ROLES,
    REFERENCES_OPEN_KWARGS,
    XARRAY_EXTENSION,
    ZARR_MEDIA_TYPE,
    ZARR_OPEN_KWARGS,
)
from h5sidecar.read import cube_summary
from h5sidecar.references import GranuleRefs

__all__ = ["CUBE_ROLE", "XARRAY_EXTENSION", "cube_assets", "zarr_asset_key"]

#: Role marking the assets of a datacube (what ``open_item`` looks for on a Collection).
CUBE_ROLE = "datacube"


def zarr_asset_key(name: str) -> str:
    """Key of the gateway asset of cube ``name``."""
    return f"{name}-zarr"


def cube_assets(
    name: str,
    refs: GranuleRefs,
    *,
    href: str,
    fmt: Literal["json", "parquet"],
    size: int,
    gateway_url: str | None = None,
) -> dict[str, dict[str, Any]]:
    """The Collection assets of cube ``name`` (see the module docstring).

    Parameters
    ----------
    name : str
        The cube's name (asset key, and its name in the gateway: ``/zarr/NAME/``).
    refs : GranuleRefs
        The cube's references (for its members and concat dimension).
    href : str
        Where readers find the references.
    fmt : "json" or "parquet"
    size : int
        Bytes of the references (all files of a Parquet directory).
    gateway_url : str, optional
        Base URL of ``h5sidecar serve``; adds the ``NAME-zarr`` asset.
    """
    info = cube_summary(refs)
    what = f"{info['members']} granules along {info['concat_dim'] or 'a dimension'}"
    assets: dict[str, dict[str, Any]] = {
        name: {
            "href": href,
            "type": JSON_MEDIA_TYPE if fmt == "json" else PARQUET_MEDIA_TYPE,
            "title": f"Datacube {name}: {what} (kerchunk "
            f"{'JSON v1' if fmt == 'json' else 'Parquet'})",
            "roles": [*REFERENCE_ROLES[fmt], CUBE_ROLE],
            "file:size": int(size),
            "xarray:open_kwargs": dict(REFERENCES_OPEN_KWARGS),
            "xarray:storage_options": {},
        }
    }
    if gateway_url:
        assets[zarr_asset_key(name)] = {
            "href": f"{gateway_url.rstrip('/')}/zarr/{name}/",
            "type": ZARR_MEDIA_TYPE,
            "title": f"Datacube {name}: {what} (Zarr v2 store served by the h5sidecar gateway)",
            "roles": ["data", "zarr", CUBE_ROLE],
            "xarray:open_kwargs": dict(ZARR_OPEN_KWARGS),
        }
    return assets
