"""Issue 9 item 5 over real HTTP: store URLs with a trailing '/' (as the README and the STAC
zarr asset write them) open with ``xr.open_datatree``; names a client cannot send are refused
instead of read as fill values."""

from __future__ import annotations

import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.workflows import index_many
from tests.gateway._http import ATL03, Corpus, gateway, http_corpus, raw_get, served

__all__ = ["http_corpus", "served"]  # fixtures used below


@pytest.mark.parametrize("view", ["zarr", "zarr3", "zarr3-shard/4"])
def test_trailing_slash_datatree_equals_h5netcdf(served, http_corpus: Corpus, view: str) -> None:
    url, _ = served
    fmt = 2 if view == "zarr" else 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: numcodecs codecs are not in the v3 spec
        tree = xr.open_datatree(f"{url}/{view}/{ATL03}/", engine="zarr", zarr_format=fmt,
                                chunks=None)  # fmt: skip
        group = "gt1l/heights"
        want = xr.open_dataset(http_corpus.local[ATL03], engine="h5netcdf", group=group,
                               phony_dims="access")  # fmt: skip
        got = tree[group].to_dataset()
        for name in ("h_ph", "lat_ph", "delta_time"):
            np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)


def test_double_slash_is_merged_not_refused(served) -> None:
    url, _ = served
    status, body = raw_get(url, f"/zarr/{ATL03}//.zmetadata".encode())
    assert status == 200 and b"metadata" in body


def test_a_chunk_request_without_a_key_is_refused(served) -> None:
    """What fsspec sends for a key under a group named '#refs#' (MATLAB v7.3 files)."""
    url, _ = served
    for view in ("zarr", "zarr3"):
        status, body = raw_get(url, f"/{view}/{ATL03}/".encode())
        assert status == 400 and b"'#' or '?'" in body


def test_hash_in_a_group_name_is_read_escaped_not_filled(tmp_path: Path) -> None:
    """A MATLAB v7.3 group '#refs#' is '%23refs%23' in the sidecar (a name an HTTP client
    would cut at '#'), and reads through the gateway equal to h5py, never as fill values."""
    src = tmp_path / "src" / "m.h5"
    src.parent.mkdir()
    with h5py.File(src, "w") as f:
        f.create_dataset("#refs#/b", data=np.arange(1, 7, dtype="u8"))
        want = f["#refs#/b"][()]
    index_many(str(src), str(tmp_path / "dest"), format="json", executor="serial")
    with gateway(str(tmp_path / "dest")) as (url, _), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for view, fmt in (("zarr", 2), ("zarr3", 3)):
            ds = xr.open_zarr(f"{url}/{view}/m.h5/", group="%23refs%23", zarr_format=fmt,
                              chunks=None)  # fmt: skip
            np.testing.assert_array_equal(ds["b"].values, want)
