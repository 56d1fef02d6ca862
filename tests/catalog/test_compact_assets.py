"""Catalog items of compact Parquet sidecars: the references asset does not claim to be kerchunk
(plain tools cannot read it), and ``open_item`` still opens it with h5sidecar."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np

from h5sidecar.catalog import build_catalog, open_item
from h5sidecar.workflows import index_many
from tests.catalog.conftest import Indexed


def test_compact_reference_asset_is_not_advertised_as_kerchunk(
    indexed: Indexed, tmp_path: Path
) -> None:
    path = indexed.atl03[0]
    dest = tmp_path / "dest"
    assert index_many(str(path), str(dest), layout="compact", executor="serial").ok
    res = build_catalog(str(dest), tmp_path / "stac", collection_id="compact",
                        gateway_url="http://127.0.0.1:9/")  # fmt: skip
    assert res.ok, res.errors
    item_path = Path(res.items[0])
    item = json.loads(item_path.read_text())
    ref = item["assets"]["references"]
    assert ref["roles"] == ["references", "h5sidecar-compact"]
    assert "kerchunk-parquet" not in ref["roles"] and "plain kerchunk" in ref["title"]
    assert ref["type"] == "application/vnd.apache.parquet"
    assert item["assets"]["zarr"]["roles"] == ["data", "zarr"]  # what plain tools open
    ds = open_item(item_path, group="gt1l/heights", mask_and_scale=False, decode_times=False)
    with h5py.File(path) as f:
        np.testing.assert_array_equal(ds["h_ph"].values, f["gt1l/heights/h_ph"][...])
