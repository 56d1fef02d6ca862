"""The assets' xarray-assets open options work with what h5sidecar installs: an Item's
``references`` asset (JSON, kerchunk Parquet, compact Parquet; local and on S3) opened as the
extension says, ``xr.open_dataset(href, **open_kwargs, storage_options=...)``, is every variable
equal to xarray + h5netcdf on the source (the datacube assets: tests/catalog/test_cube_assets.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pystac
import pytest
import xarray as xr
from pystac.extensions.xarray_assets import XarrayAssetsExtension

from h5sidecar.catalog import build_catalog
from h5sidecar.workflows import index_many
from tests._matrix import Tally, compare_group, truth
from tests.catalog.conftest import Indexed

pytestmark = pytest.mark.xdist_group("catalog")


def _assert_reads_as_h5netcdf(open_group: Any, source: Path, group: str) -> None:
    pair = truth(source, group)
    assert pair is not None
    tally = Tally()
    compare_group(open_group, pair, f"{source.name}/{group}", tally, set())
    assert not tally.differ and not tally.refused, (tally.differ, tally.refused)
    assert tally.counts["equal"] == len(pair[0].variables), tally.counts


def _open_as_the_extension_says(asset: dict[str, Any], group: str = "",
                                **where: Any) -> xr.Dataset:  # fmt: skip
    """The extension's recipe; ``where``: the object store's options (never in the catalog)."""
    options = {**asset["xarray:storage_options"], **where}
    return xr.open_dataset(asset["href"], **asset["xarray:open_kwargs"],
                           storage_options=options, group=group or None)  # fmt: skip


def test_advertised_options_need_no_extra(catalog_dir: Path) -> None:
    """The base install registers engine "h5sidecar"; kerchunk's engine and Dask (``chunks``)
    come with no extra."""
    item = json.loads(next((catalog_dir / "samples").rglob("gridded_sample*.json")).read_text())
    assert item["assets"]["references"]["xarray:open_kwargs"] == {"engine": "h5sidecar"}
    assert item["assets"]["references"]["xarray:storage_options"] == {}
    assert item["assets"]["zarr"]["xarray:open_kwargs"] == {"engine": "zarr",
                                                            "consolidated": True}  # fmt: skip


@pytest.mark.parametrize("layout", ["json", "kerchunk", "compact"])
def test_references_asset_opens_with_its_options(indexed: Indexed, tmp_path: Path,
                                                 layout: str) -> None:  # fmt: skip
    dest = tmp_path / "dest"
    fmt = {"format": "json"} if layout == "json" else {"layout": layout}
    report = index_many(str(indexed.src), str(dest), executor="serial", **fmt)  # type: ignore[arg-type]
    assert report.ok, report.to_dict()
    res = build_catalog(str(dest), tmp_path / "stac", collection_id="c")
    assert res.ok, res.errors
    items = {Path(p).parent.name: Path(p) for p in res.items}
    ncitem = pystac.Item.from_file(str(items["gridded_sample"]))
    asset = ncitem.assets["references"]
    xa = XarrayAssetsExtension.ext(asset)  # pystac's accessors of the extension
    _assert_reads_as_h5netcdf(
        lambda: xr.open_dataset(asset.href, **(xa.open_kwargs or {}),
                                storage_options=xa.storage_options),
        indexed.netcdf, "")
    atl03 = json.loads(items[indexed.atl03[0].stem].read_text())["assets"]["references"]
    _assert_reads_as_h5netcdf(lambda: _open_as_the_extension_says(atl03, "gt1l/heights"),
                              indexed.atl03[0], "gt1l/heights")  # fmt: skip
    tree = xr.open_datatree(atl03["href"], **atl03["xarray:open_kwargs"],
                            storage_options=atl03["xarray:storage_options"])  # fmt: skip
    assert "h_ph" in tree["gt1l/heights"].dataset


def test_references_asset_on_s3(indexed: Indexed, tmp_path: Path, s3, s3_bucket: str,
                                s3_storage_options: dict[str, Any]) -> None:  # fmt: skip
    """Granules and sidecars on the S3 server: the asset's options plus where the server is."""
    for path in (indexed.netcdf, indexed.atl03[0]):
        s3.put(str(path), f"{s3_bucket}/src/{path.name}")
    dest = f"s3://{s3_bucket}/dest"
    # compact: 2-3 objects a granule, where the kerchunk layout PUTs ~900 (~9 ms each on moto);
    # the layouts' assets are compared locally above
    report = index_many(f"s3://{s3_bucket}/src", dest, storage_options=s3_storage_options,
                        executor="serial", layout="compact")  # fmt: skip
    assert report.ok, report.to_dict()
    res = build_catalog(dest, tmp_path / "stac", storage_options=s3_storage_options)
    assert res.ok, res.errors
    items = {Path(p).parent.name: json.loads(Path(p).read_text()) for p in res.items}
    nc = items["gridded_sample"]["assets"]["references"]
    assert nc["href"] == f"{dest}/{indexed.netcdf.name}.parq"
    _assert_reads_as_h5netcdf(lambda: _open_as_the_extension_says(nc, **s3_storage_options),
                              indexed.netcdf, "")  # fmt: skip
    atl03 = items[indexed.atl03[0].stem]["assets"]["references"]
    _assert_reads_as_h5netcdf(
        lambda: _open_as_the_extension_says(atl03, "gt1l/heights", **s3_storage_options),
        indexed.atl03[0], "gt1l/heights")
