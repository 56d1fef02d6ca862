"""One granule of DEST -> its STAC Item, the reason it is left out, or a datacube's references;
and the datacubes' Collection assets."""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from h5sidecar.catalog._cube_assets import XARRAY_EXTENSION, cube_assets
from h5sidecar.catalog._item import FILE_EXTENSION, build_item
from h5sidecar.catalog._result import ItemError
from h5sidecar.catalog.extent._granule_extent import granule_extent
from h5sidecar.dest import GranuleInfo, dest_fs, sidecar_size
from h5sidecar.errors import ErrorKind, H5SidecarError, InvalidRequestError
from h5sidecar.read import cube_names, is_cube
from h5sidecar.references import GranuleRefs, read_layout, read_refs

__all__ = ["add_cubes", "catalogue_one", "given_cubes", "published"]


def published(sidecar: str, dest: str, references_base_url: str | None) -> str | None:
    """Where a sidecar under DEST is published (``references_base_url`` + its relative path)."""
    if not references_base_url:
        return None
    rel = posixpath.relpath(sidecar.split("://", 1)[-1], dest.split("://", 1)[-1])
    return f"{references_base_url.rstrip('/')}/{rel}"


def catalogue_one(
    g: GranuleInfo,
    *,
    dest: str,
    gateway_url: str | None,
    references_base_url: str | None,
    storage_options: Mapping[str, Any] | None,
    track_footprints: Literal["recorded", "read"] = "recorded",
) -> dict[str, Any] | ItemError | GranuleRefs:
    """The granule's Item, why it is left out, or the references of a cube found in DEST."""
    try:
        refs = read_refs(g.sidecar, storage_options=dict(storage_options or {}) or None)
        if is_cube(refs):
            return refs
        if g.format == "parquet":  # a compact sidecar's asset must not claim kerchunk
            layout = read_layout(g.sidecar, storage_options=dict(storage_options or {}) or None)
            g = dataclasses.replace(g, layout=layout or "kerchunk")
        ext = granule_extent(refs, storage_options=storage_options,
                             track_footprints=track_footprints)  # fmt: skip
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
    href = published(g.sidecar, dest, references_base_url)
    return build_item(refs, ext, g, gateway_url=gateway_url, references_href=href)


def given_cubes(
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


def add_cubes(
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
        (g, r, published(g.sidecar, dest, references_base_url) or g.sidecar)
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
