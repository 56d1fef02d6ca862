"""Every reader of h5sidecar on compact Parquet sidecars: values equal h5py's, and opening one on
S3 costs two GETs of the sidecar (``.zmetadata`` and the manifests file), whatever is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

import h5sidecar
from h5sidecar.read.zarr.filesystem import H5SidecarFileSystem
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import GranuleRefs, write_parquet, write_refs
from tests._granules import read_h5, refs_for
from tests.faultproxy import FaultProxy

#: ATL03-like groups compared array by array (photon and segment rates, ancillary scalars).
GROUPS = ("gt1l/heights", "gt1l/geolocation", "orbit_info")


@pytest.fixture(scope="module")
def compact_atl03(atl03_refs: GranuleRefs, tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_parquet(atl03_refs, tmp_path_factory.mktemp("c") / "atl03.h5.parq",
                         layout="compact")  # fmt: skip


def _arrays(h5: Path, groups: tuple[str, ...]) -> list[str]:
    names: list[str] = []
    with h5py.File(h5, "r") as f:
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return [n for n in names if n.rpartition("/")[0] in groups]


def test_engine_reads_compact_atl03_like_h5py(compact_atl03: str, atl03_h5: Path) -> None:
    for group in GROUPS:
        ds = xr.open_dataset(compact_atl03, engine="h5sidecar", group=group,
                             mask_and_scale=False, decode_times=False)  # fmt: skip
        assert len(ds.variables) > 3, group
        for name, var in ds.variables.items():
            np.testing.assert_array_equal(var.values, read_h5(atl03_h5, f"{group}/{name}"),
                                          err_msg=f"{group}/{name}")  # fmt: skip


def test_read_arrays_store_and_fs_read_compact_like_h5py(
    compact_atl03: str, atl03_h5: Path, atl03_refs: GranuleRefs
) -> None:
    names = [n for n in _arrays(atl03_h5, GROUPS) if n in atl03_refs.arrays]
    assert len(names) > 20
    got = h5sidecar.read_arrays(compact_atl03, names)
    root = zarr.open_group(SidecarStore(compact_atl03), mode="r")
    fs = H5SidecarFileSystem(compact_atl03)
    h_ph = np.frombuffer(fs.cat("gt1l/heights/h_ph/0"), dtype="u1")  # one raw chunk over fs
    assert h_ph.size > 0
    for name in names:
        want = read_h5(atl03_h5, name)
        np.testing.assert_array_equal(got[name], want, err_msg=name)
        np.testing.assert_array_equal(root[name][...], want, err_msg=name)


def test_engine_reads_compact_netcdf_like_h5py(cf_nc: Path, tmp_path: Path) -> None:
    compact = write_parquet(refs_for(cf_nc), tmp_path / "cf.nc.parq", layout="compact")
    ds = xr.open_dataset(compact, engine="h5sidecar", mask_and_scale=False, decode_times=False)
    with h5py.File(cf_nc, "r") as f:
        for name in ("tas", "pr", "lat", "lon", "time", "orog"):
            np.testing.assert_array_equal(ds[name].values, f[name][()], err_msg=name)
    decoded = xr.open_dataset(compact, engine="h5sidecar")
    expected = xr.open_dataset(cf_nc, engine="h5netcdf")
    xr.testing.assert_equal(decoded[["tas", "pr"]], expected[["tas", "pr"]])


def test_compact_on_s3_costs_two_sidecar_gets(
    small_h5: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any],
    proxy: FaultProxy,
) -> None:
    url = f"s3://{s3_bucket}/granules/small.h5"
    s3.put(str(small_h5), url)
    refs = refs_for(url, storage_options=s3_storage_options)
    sidecar = write_refs(refs, f"{url}.parq", storage_options=s3_storage_options,
                         layout="compact")  # fmt: skip
    proxy.clear()
    via_proxy = {**s3_storage_options, "endpoint_url": proxy.url}
    names = list(refs.arrays)
    got = h5sidecar.read_arrays(sidecar, names, storage_options=via_proxy)
    for name in names:
        np.testing.assert_array_equal(got[name], read_h5(small_h5, name), err_msg=name)
    sidecar_gets = sorted(r.path.split("?")[0].rsplit(".parq/", 1)[1]
                          for r in proxy.gets() if ".parq/" in r.path)  # fmt: skip
    assert sidecar_gets == [".h5sidecar/manifests.parq", ".zmetadata"]


def test_a_batch_loads_its_manifests_in_a_few_thread_hops(
    compact_atl03: str, atl03_h5: Path, atl03_refs: GranuleRefs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading every array in one batch builds their manifests in at most
    ``MANIFEST_THREADS`` threads (each takes the next array), not one hop per array; values
    equal h5py's."""
    import asyncio

    from h5sidecar.read.native import _batch_parts

    hops = []
    real = asyncio.to_thread

    async def counted(fn: Any, *args: Any) -> Any:
        hops.append(fn)
        return await real(fn, *args)

    monkeypatch.setattr(_batch_parts.asyncio, "to_thread", counted)
    names = [n for n in _arrays(atl03_h5, GROUPS) if n in atl03_refs.arrays]
    assert len(names) > 2 * _batch_parts.MANIFEST_THREADS
    got = h5sidecar.read_arrays(SidecarStore(compact_atl03), names)
    assert 1 <= len(hops) <= _batch_parts.MANIFEST_THREADS
    for name in names:
        np.testing.assert_array_equal(got[name], read_h5(atl03_h5, name), err_msg=name)
