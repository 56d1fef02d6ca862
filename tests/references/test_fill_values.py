"""Fill values: what plain Zarr readers mask and what never-written chunks read as (issue 9.1, 9.2,
9.4).  Truth: xarray + h5netcdf (decoded) and h5py (raw) on the same file."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.indexer import index_granule
from h5sidecar.references import read_refs, virtualizarr_unreadable, write_json, write_parquet


def _plain(sidecar: Path, **kw: object) -> xr.Dataset:
    so = {"fo": str(sidecar), "remote_protocol": "file"}
    return xr.open_dataset("reference://", engine="zarr",
                           backend_kwargs={"storage_options": so, **kw})  # fmt: skip


def _netcdf_like(path: Path) -> Path:
    """GPM-style variables: storage fill 0 with a CF _FillValue of -9999.9, real zeros."""
    with h5py.File(path, "w") as f:
        x = f.create_dataset("x", data=np.arange(6.0))
        x.make_scale("x")
        data = np.array([0.0, 1.5, -9999.9, 0.0, 2.5, 0.0], dtype="f4")
        v = f.create_dataset("precip", data=data, chunks=(3,), compression="gzip", fillvalue=0.0)
        v.attrs["_FillValue"] = np.float32(-9999.9)
        v.dims[0].attach_scale(x)
        # fill value attribute present, storage fill differs, one chunk never written
        w = f.create_dataset("sparse", shape=(6,), dtype="f4", chunks=(3,), fillvalue=0.0)
        w[:3] = [1.0, -1.0, 0.0]
        w.attrs["_FillValue"] = np.float32(-1.0)
        w.dims[0].attach_scale(x)
        # no _FillValue, a non-zero storage fill, one chunk never written
        n = f.create_dataset("offset", shape=(6,), dtype="i2", chunks=(3,), fillvalue=7)
        n[3:] = [1, 2, 3]
        n.dims[0].attach_scale(x)
        # a float array never written at all (VirtualiZarr would read NaN for a null fill)
        e = f.create_dataset("empty", shape=(6,), dtype="f8", chunks=(2,))
        e.dims[0].attach_scale(x)
    return path


@pytest.fixture
def granule(tmp_path: Path) -> Path:
    return _netcdf_like(tmp_path / "g.h5")


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_plain_xarray_masks_what_h5netcdf_masks(granule: Path, tmp_path: Path, fmt: str) -> None:
    refs = index_granule(str(granule))
    write = write_json if fmt == "json" else write_parquet
    sidecar = write(refs, tmp_path / ("r.json" if fmt == "json" else "r.parq"))
    want = xr.open_dataset(granule, engine="h5netcdf")
    got = _plain(sidecar)
    for name in ("precip", "sparse", "offset", "empty"):
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
    # the GPM case: real zeros stay zeros, only -9999.9 is masked
    assert np.count_nonzero(got["precip"].values == 0) == 3
    assert np.isnan(got["precip"].values).sum() == 1


def test_never_written_chunks_read_as_the_storage_fill(granule: Path, tmp_path: Path) -> None:
    refs = index_granule(str(granule))
    sidecar = write_json(refs, tmp_path / "r.json")
    raw = _plain(sidecar, mask_and_scale=False)
    with h5py.File(granule) as f:
        for name in ("sparse", "offset", "empty"):
            np.testing.assert_array_equal(raw[name].values, f[name][...], err_msg=name)
    # materialized only where a reader would misread them; never for "precip" (fully written)
    assert refs.arrays["precip"].manifest.n_inline == 0
    for name in ("sparse", "offset", "empty"):
        assert refs.arrays[name].manifest.n_missing == 0, name
        assert "never-written chunk(s) stored in the sidecar" in refs.arrays[name].note
    assert refs.arrays["empty"].status == "inlined"
    assert set(virtualizarr_unreadable(refs)) >= {"sparse", "offset", "empty"}


def test_zarray_holds_the_cf_fill_and_zattrs_xarrays_encoding(granule: Path, tmp_path: Path) -> None:
    sidecar = write_json(index_granule(str(granule)), tmp_path / "r.json")
    docs = json.loads(Path(sidecar).read_text())["refs"]
    zarray = json.loads(docs["precip/.zarray"])
    zattrs = json.loads(docs["precip/.zattrs"])
    assert zarray["fill_value"] == pytest.approx(float(np.float32(-9999.9)))
    encoded = zattrs["_FillValue"]
    assert struct.unpack("<d", base64.b64decode(encoded))[0] == zarray["fill_value"]
    from xarray.backends.zarr import FillValueCoder

    assert FillValueCoder.decode(encoded, "float32") == zarray["fill_value"]
    assert json.loads(docs["offset/.zarray"])["fill_value"] is None  # no attribute: no mask
    # our reader gives the plain number back (the model never holds the encoding)
    back = read_refs(str(sidecar))
    assert back.arrays["precip"].meta.attrs["_FillValue"] == zarray["fill_value"]
    assert back == read_refs(str(write_json(back, tmp_path / "again.json")))


def test_virtualizarr_reads_masked_values(granule: Path, tmp_path: Path) -> None:
    pytest.importorskip("virtualizarr")
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore
    from virtualizarr.parsers import KerchunkJSONParser

    refs = index_granule(str(granule))
    sidecar = write_json(refs, tmp_path / "r.json")
    skip = virtualizarr_unreadable(refs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: numcodecs codecs are not in the v3 spec
        store = KerchunkJSONParser(skip_variables=skip)(
            f"file://{sidecar}", ObjectStoreRegistry({"file://": LocalStore()}))  # fmt: skip
        got = xr.open_dataset(store, engine="zarr", consolidated=False, zarr_format=3)
        want = xr.open_dataset(granule, engine="h5netcdf")
        np.testing.assert_array_equal(got["precip"].values, want["precip"].values)


def test_hdf5_codecs_reach_zarr_v3_through_entry_points() -> None:
    """zarr resolves numcodecs.h5sidecar.* by name without importing h5sidecar first."""
    code = (
        "import sys, zarr.registry as r\n"
        "assert 'h5sidecar' not in sys.modules\n"
        "for n in ('szip', 'nbit', 'scaleoffset', 'lzf', 'lz4', 'bitshuffle', 'zfp', 'blosc2',"
        " 'hdf5filter'):\n"
        "    print(r.get_codec_class('numcodecs.h5sidecar.' + n).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [
        "Szip", "Nbit", "ScaleOffset", "LZF", "LZ4", "Bitshuffle", "ZFP", "Blosc2", "FilterPlugin"
    ]  # fmt: skip


def test_v3_views_carry_the_fill_attribute_xarray_decodes(granule: Path, tmp_path: Path) -> None:
    """Zarr v3 readers decode ``_FillValue`` with xarray's FillValueCoder (a float given as a
    JSON number failed: 'expected str or bytes for dtype float32')."""
    from xarray.backends.zarr import FillValueCoder

    from h5sidecar.read import SidecarStore
    from h5sidecar.read.zarr._v3_metadata import array_metadata_v3

    refs = index_granule(str(granule))
    arr = refs.arrays["precip"]
    doc = array_metadata_v3(arr.meta, fill_value=arr.zarray_fill_value(), path="precip")
    assert FillValueCoder.decode(doc["attributes"]["_FillValue"], "float32") == pytest.approx(
        -9999.9, rel=1e-6
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr: numcodecs codecs are not in the v3 spec
        got = xr.open_dataset(SidecarStore(refs, zarr_format=3), engine="zarr", zarr_format=3,
                              consolidated=False)  # fmt: skip
        want = xr.open_dataset(granule, engine="h5netcdf", phony_dims="access")
        for name in ("precip", "sparse", "offset", "empty"):
            np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
