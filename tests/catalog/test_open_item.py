"""``h5sidecar.open_item``: items of the catalog open as xarray datasets equal to h5py's values,
through JSON and Parquet sidecars, from an item file, a dict or a pystac.Item."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pystac
import pytest

import h5sidecar
from h5sidecar.errors import InvalidReferenceError
from tests.catalog.conftest import Indexed

#: one xdist worker for the session's sample granules and catalog (where grouping works)
pytestmark = pytest.mark.xdist_group("catalog")


def _item_file(stac: Path, collection: str, stem: str) -> Path:
    return stac / collection / stem / f"{stem}.json"


@pytest.mark.parametrize("collection", ["samples", "samples-json"])
def test_open_item_values_equal_h5py(indexed: Indexed, catalog_dir: Path, collection: str) -> None:
    path = indexed.atl03[0]
    ds = h5sidecar.open_item(_item_file(catalog_dir, collection, path.stem), group="gt2r/heights")
    with h5py.File(path) as f:
        for name in ("h_ph", "lat_ph", "lon_ph", "signal_conf_ph"):
            np.testing.assert_array_equal(ds[name].values, f[f"gt2r/heights/{name}"][:])
        assert ds.sizes["delta_time"] == f["gt2r/heights/h_ph"].shape[0]


def test_open_item_from_dict_and_pystac(indexed: Indexed, catalog_dir: Path) -> None:
    file = _item_file(catalog_dir, "samples", indexed.netcdf.stem)
    doc = json.loads(file.read_text())
    item = pystac.Item.from_file(str(file))
    with h5py.File(indexed.netcdf) as f:
        orog = f["orog"][:]
    for obj in (doc, item):
        ds = h5sidecar.open_item(obj)
        np.testing.assert_array_equal(ds["orog"].values, orog)


def test_open_item_datatree(indexed: Indexed, catalog_dir: Path) -> None:
    path = indexed.atl03[1]
    tree = h5sidecar.open_item(_item_file(catalog_dir, "samples", path.stem), datatree=True)
    with h5py.File(path) as f:
        np.testing.assert_array_equal(tree["gt1l/geolocation"]["segment_id"].values,
                                      f["gt1l/geolocation/segment_id"][:])
        groups = {k for k, v in f.items() if isinstance(v, h5py.Group)}
        assert groups == set(tree.children)
        np.testing.assert_array_equal(tree["ds_xyz"].values, f["ds_xyz"][:])


def test_open_item_without_the_asset(catalog_dir: Path, indexed: Indexed) -> None:
    file = _item_file(catalog_dir, "samples-json", indexed.atl03[0].stem)
    with pytest.raises(InvalidReferenceError, match=r"no 'zarr' asset.*--gateway-url"):
        h5sidecar.open_item(file, asset="zarr")
    with pytest.raises(InvalidReferenceError, match="not a STAC Item"):
        h5sidecar.open_item(catalog_dir / "catalog.json")
