"""The gateway over compact Parquet sidecars (which plain kerchunk/fsspec cannot read): zarr and
xarray over HTTP read every value h5py reads; the gateway is how plain tools get at them."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

from h5sidecar.references import read_layout
from tests.gateway._http import ATL03, SMALL, Corpus, gateway, http_corpus
from tests.gateway.test_http_zarr import ATL03_GROUPS, assert_same, datasets

__all__ = ["http_corpus"]  # fixture used below


@pytest.fixture(scope="module")
def compact_dest(http_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> str:
    from h5sidecar.workflows import index_many

    dest = tmp_path_factory.mktemp("compact") / "dest"
    report = index_many(f"s3://{http_corpus.bucket}/src", str(dest), layout="compact",
                        executor="serial", storage_options=http_corpus.options)  # fmt: skip
    assert report.ok, report.to_dict()
    for name in (ATL03, SMALL):
        sidecar = dest / f"{name}.parq"
        assert read_layout(str(sidecar)) == "compact"
        assert len([p for p in Path(sidecar).rglob("*") if p.is_file()]) == 2
    return str(dest)


def test_gateway_serves_compact_sidecars_like_h5py(compact_dest: str, http_corpus: Corpus) -> None:
    with gateway(compact_dest, http_corpus.options) as (url, _):
        for name, groups in ((ATL03, ATL03_GROUPS), (SMALL, None)):
            root = zarr.open_group(f"{url}/zarr/{name}/", mode="r")
            with h5py.File(http_corpus.local[name]) as f:
                assert_same(root, f, datasets(f, groups))
        ds = xr.open_zarr(f"{url}/zarr/{ATL03}/", group="gt1l/heights", mask_and_scale=False,
                          decode_times=False)  # fmt: skip
        with h5py.File(http_corpus.local[ATL03]) as f:
            for var_name, var in ds.variables.items():
                np.testing.assert_array_equal(var.values, f[f"gt1l/heights/{var_name}"][...],
                                              err_msg=var_name)  # fmt: skip
