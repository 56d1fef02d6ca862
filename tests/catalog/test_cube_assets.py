"""Datacubes in the STAC catalog: Collection-level assets that open with ``h5sidecar.open_item``,
with plain xarray and the asset's xarray-assets open options, and through the gateway; every value
equals xarray + h5netcdf on the member files, concatenated along time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pystac
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.catalog import build_catalog
from h5sidecar.cli import main
from h5sidecar.errors import InvalidReferenceError, InvalidRequestError
from h5sidecar.sample import write_daily_collection
from h5sidecar.workflows import build_cube, index_many
from h5sidecar.workflows.checks._cfcheck import open_truth
from tests.gateway._http import gateway

DAYS = 3
XARRAY_EXT = "https://stac-extensions.github.io/xarray-assets/v1.0.0/schema.json"


@pytest.fixture(scope="module")
def cubes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Daily granules, a cube in DEST (``all``, JSON) and one beside it (``daily``, Parquet),
    a gateway serving the latter, and a catalog written with its URL."""
    root = tmp_path_factory.mktemp("cube-stac")
    files = write_daily_collection(root / "nc", days=DAYS)
    report = index_many(str(root / "nc"), str(root / "dest"), executor="serial")
    assert report.ok, report.to_dict()
    outside = build_cube(str(root / "dest"), str(root / "daily.parq")).path
    build_cube(str(root / "dest"), str(root / "dest" / "all.json"), format="json")
    with gateway(str(root / "dest"), cubes=[outside, "all=" + str(root / "dest/all.json")]) as (
        url, _app,
    ):
        result = build_catalog(str(root / "dest"), root / "stac", gateway_url=url,
                               cubes=[outside], collection_id="daily")  # fmt: skip
        yield {"files": files, "result": result, "url": url, "root": root}


def _truth(files: list[Path], *, widened: bool) -> xr.Dataset:
    """xarray + h5netcdf on the files in time order; ``widened``: decoded with float64 packing
    attributes, as every plain Zarr reader decodes (JSON attributes hold no float32)."""
    parts = [open_truth(f, "")[1 if widened else 0] for f in files]
    return xr.concat(parts, "time", data_vars="minimal", coords="minimal",
                     compat="override").sortby("time").load()  # fmt: skip


def _assert_same(ds: xr.Dataset, want: xr.Dataset) -> None:
    assert ds.sizes["time"] == DAYS
    assert set(ds.variables) == set(want.variables)
    for name in want.variables:
        np.testing.assert_array_equal(ds[name].values, want[name].values)
    assert np.isnan(ds["tas"].values).any()


def _collection(cubes: dict[str, Any]) -> dict[str, Any]:
    return json.loads(Path(cubes["result"].collection).read_text())


def test_cubes_are_collection_assets(cubes: dict[str, Any]) -> None:
    result = cubes["result"]
    assert result.cubes == ("daily", "all") and len(result.items) == DAYS  # no item for a cube
    doc = _collection(cubes)
    assert XARRAY_EXT in doc["stac_extensions"]
    assert set(doc["assets"]) == {"daily", "daily-zarr", "all", "all-zarr"}
    daily, zarr_asset = doc["assets"]["daily"], doc["assets"]["all-zarr"]
    assert daily["type"] == "application/vnd.apache.parquet"
    assert daily["roles"] == ["references", "kerchunk-parquet", "datacube"]
    assert daily["xarray:open_kwargs"] == {"engine": "h5sidecar"}  # needs no extra
    assert daily["xarray:storage_options"] == {}
    assert zarr_asset["xarray:open_kwargs"] == {"engine": "zarr", "consolidated": True}
    assert doc["assets"]["all"]["type"] == "application/json"
    assert zarr_asset["href"] == f"{cubes['url']}/zarr/all/"
    assert f"{DAYS} granules along time" in zarr_asset["title"]


@pytest.mark.parametrize("name", ["daily", "all"])
def test_open_item_opens_a_collection_cube(cubes: dict[str, Any], name: str) -> None:
    path = cubes["result"].collection
    want = _truth(cubes["files"], widened=False)
    for obj in (path, pystac.Collection.from_file(path)):
        with h5sidecar.open_item(obj, asset=name, chunks=None) as ds:
            _assert_same(ds, want)
    with h5sidecar.open_item(path, asset=f"{name}-zarr") as ds:  # through the gateway
        _assert_same(ds, _truth(cubes["files"], widened=True))


@pytest.mark.parametrize("name", ["daily", "all", "all-zarr"])
def test_plain_xarray_with_the_assets_open_options(cubes: dict[str, Any], name: str) -> None:
    """What xarray-assets readers do: ``xr.open_dataset(href, **open_kwargs,
    storage_options=...)`` (our engine for the references: decoded as h5netcdf decodes; zarr's
    for the gateway: float64 packing attributes)."""
    asset = _collection(cubes)["assets"][name]
    kwargs = dict(asset["xarray:open_kwargs"])
    if "xarray:storage_options" in asset:
        kwargs["storage_options"] = asset["xarray:storage_options"]
    with xr.open_dataset(asset["href"], **kwargs) as ds:
        _assert_same(ds, _truth(cubes["files"], widened=name.endswith("-zarr")))


def test_xpystac_opens_the_gateway_asset(cubes: dict[str, Any]) -> None:
    collection = pystac.Collection.from_file(cubes["result"].collection)
    with xr.open_dataset(collection.assets["daily-zarr"], engine="stac") as ds:
        _assert_same(ds, _truth(cubes["files"], widened=True))


def test_default_asset_is_the_only_cube(cubes: dict[str, Any]) -> None:
    doc = _collection(cubes)
    with pytest.raises(InvalidReferenceError, match=r"2 datacube assets.*pass asset=NAME"):
        h5sidecar.open_item(doc)
    for key in ("daily", "daily-zarr"):
        del doc["assets"][key]
    with h5sidecar.open_item(doc, chunks=None) as ds:
        _assert_same(ds, _truth(cubes["files"], widened=False))
    doc["assets"] = {}
    with pytest.raises(InvalidReferenceError, match=r"0 datacube assets.*--cube"):
        h5sidecar.open_item(doc)


def test_cli_catalog_cube(cubes: dict[str, Any], tmp_path: Path, capsys) -> None:
    root = cubes["root"]
    assert main(["catalog", str(root / "dest"), "-o", str(tmp_path), "--cube",
                 f"year={root / 'daily.parq'}"]) == 0
    assert "cube asset(s) of the collection: year, all" in capsys.readouterr().out
    with pytest.raises(InvalidRequestError, match="not a datacube"):
        build_catalog(str(root / "dest"), tmp_path / "x",
                      cubes=[str(root / "dest" / "tas_20200101.nc.parq")])


def test_cube_on_s3_in_the_catalog(tmp_path: Path, s3, s3_bucket: str,
                                   s3_storage_options) -> None:  # fmt: skip
    files = write_daily_collection(tmp_path / "nc", days=DAYS, nlat=4, nlon=6)
    for f in files:
        s3.put(str(f), f"{s3_bucket}/nc/{f.name}")
    dest = f"s3://{s3_bucket}/sidecars"
    report = index_many(f"s3://{s3_bucket}/nc", dest, storage_options=s3_storage_options,
                        executor="serial")  # fmt: skip
    assert report.ok, report.to_dict()
    cube = build_cube(dest, f"s3://{s3_bucket}/cubes/tas.json", format="json",
                      storage_options=s3_storage_options).path  # fmt: skip
    result = build_catalog(dest, tmp_path / "stac", cubes=[cube],
                           storage_options=s3_storage_options)  # fmt: skip
    doc = json.loads(Path(result.collection).read_text())
    asset = doc["assets"]["tas"]
    assert asset["href"] == cube and asset["file:size"] == s3.size(cube)
    assert asset["xarray:storage_options"] == {}
    with h5sidecar.open_item(result.collection, chunks=None,
                             storage_options=s3_storage_options) as ds:  # fmt: skip
        _assert_same(ds, _truth(files, widened=False))
    # the asset's options, plus where the object store is (never written into the catalog)
    opts = {**asset["xarray:storage_options"], **s3_storage_options}
    with xr.open_dataset(asset["href"], **asset["xarray:open_kwargs"], storage_options=opts) as ds:
        _assert_same(ds, _truth(files, widened=False))
