"""Our sidecars read by PLAIN tools (fsspec + zarr + xarray, no h5sidecar reader), vs h5py.

Both formats, local and on the moto S3 server, with nested groups (opened through consolidated
metadata), missing chunks (some inside a partly filled Parquet record), inline chunks (ASCII and
binary) and a 0-d array.  A differential test checks that fsspec's ``ReferenceFileSystem`` serves
the same bytes for every key over our Parquet (both pandas engines) and our JSON, and that these
are the bytes our model points at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import h5py
import numpy as np
import pytest
import xarray as xr
import zarr
from fsspec.implementations.reference import LazyReferenceMapper, ReferenceFileSystem
from zarr.storage import FsspecStore

from h5sidecar.references import (
    GranuleRefs,
    SidecarFormat,
    chunk_key,
    write_json,
    write_parquet,
    write_refs,
)
from tests.references._h5refs import refs_from_h5, write_sample

FORMATS = [("json", "json"), ("parquet", "parq")]
RECORD_SIZE = 3  # small records: several files per array, one partly missing


@pytest.fixture(scope="module")
def granule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample(tmp_path_factory.mktemp("granule") / "ATL03_sample.h5")


def _refs(granule: Path, url: str | None = None) -> GranuleRefs:
    refs = refs_from_h5(granule, url=url, inline_below=64)
    manifests = [a.manifest for a in refs.arrays.values()]
    # the sample must exercise what the formats encode specially
    assert any(m.n_missing for m in manifests) and any(m.n_inline for m in manifests)
    assert any(m.grid_shape == () for m in manifests)
    return refs


def _check_zarr(storage_options: dict[str, Any], granule: Path, refs: GranuleRefs) -> None:
    store = FsspecStore.from_url("reference://", read_only=True, storage_options=storage_options)
    root = zarr.open_group(store, mode="r", zarr_format=2)
    assert root.metadata.consolidated_metadata is not None  # read from .zmetadata
    assert root.attrs["title"] == "sample granule"
    heights = root["gt1l/heights"]  # a nested group
    assert isinstance(heights, zarr.Group) and heights.attrs["description"] == "photon heights"
    with h5py.File(granule, "r") as f:
        for path in refs.arrays:
            node = root[path]
            assert isinstance(node, zarr.Array), path
            got = np.asarray(node[...])
            want = f[path][()]
            assert got.dtype == want.dtype, path
            np.testing.assert_array_equal(got, want, err_msg=path)
        assert (
            dict(root["gt1l/heights/h_ph"].attrs)["units"] == f["gt1l/heights/h_ph"].attrs["units"]
        )


def _check_xarray(storage_options: dict[str, Any], granule: Path) -> None:
    ds = xr.open_dataset(
        "reference://",
        engine="zarr",
        group="gt1l/heights",
        mask_and_scale=False,  # compare raw values (dist_ph has a fill value)
        backend_kwargs={"storage_options": storage_options},
    )
    with ds, h5py.File(granule, "r") as f:
        assert set(ds.data_vars) == {"h_ph", "signal_conf_ph", "dist_ph"}
        for name in ds.data_vars:
            np.testing.assert_array_equal(ds[name].values, f[f"gt1l/heights/{name}"][()])
        assert ds["h_ph"].attrs["units"] == "meters"


@pytest.mark.parametrize(("fmt", "ext"), FORMATS)
def test_local(granule: Path, tmp_path: Path, fmt: SidecarFormat, ext: str) -> None:
    refs = _refs(granule)
    sidecar = write_refs(
        refs, tmp_path / f"ATL03_sample.h5.{ext}", format=fmt, record_size=RECORD_SIZE
    )
    options = {"fo": sidecar, "remote_protocol": "file"}
    _check_zarr(options, granule, refs)
    _check_xarray(options, granule)


@pytest.mark.parametrize(("fmt", "ext"), FORMATS)
def test_s3(
    granule: Path,
    s3: Any,
    s3_bucket: str,
    s3_storage_options: dict[str, Any],
    fmt: SidecarFormat,
    ext: str,
) -> None:
    s3.put_file(str(granule), f"{s3_bucket}/granules/ATL03_sample.h5")
    refs = _refs(granule, url=f"s3://{s3_bucket}/granules/ATL03_sample.h5")
    sidecar = f"s3://{s3_bucket}/sidecars/ATL03_sample.h5.{ext}"
    write_refs(
        refs,
        sidecar,
        format=fmt,
        storage_options=s3_storage_options,
        record_size=RECORD_SIZE,
    )
    options = {
        "fo": sidecar,
        "target_options": s3_storage_options,
        "remote_protocol": "s3",
        "remote_options": {**s3_storage_options, "asynchronous": True},
    }
    _check_zarr(options, granule, refs)
    _check_xarray(options, granule)


def test_differential_every_key(granule: Path, tmp_path: Path) -> None:
    refs = _refs(granule)
    as_json = write_json(refs, tmp_path / "s.json")
    as_parquet = write_parquet(refs, tmp_path / "s.parq", record_size=RECORD_SIZE)
    by_json = fsspec.filesystem(
        "reference", fo=as_json, remote_protocol="file", skip_instance_cache=True
    )
    by_parquet = fsspec.filesystem(
        "reference", fo=as_parquet, remote_protocol="file", skip_instance_cache=True
    )  # fsspec's default engine
    by_arrow = ReferenceFileSystem(
        fo=LazyReferenceMapper(as_parquet, engine="pyarrow"), remote_protocol="file"
    )
    raw = granule.read_bytes()
    n_keys = 0
    for path, arr in refs.arrays.items():
        for index in np.ndindex(arr.manifest.grid_shape):
            key = f"{path}/{chunk_key(index)}"
            ref = arr.manifest.get(index)
            if ref is None:
                for fs in (by_json, by_parquet):
                    with pytest.raises(FileNotFoundError):
                        fs.cat_file(key)
                continue
            want = ref if isinstance(ref, bytes) else raw[ref[1] : ref[1] + ref[2]]
            assert by_json.cat_file(key) == by_parquet.cat_file(key) == want, key
            # pandas >= 3 with the pyarrow engine turns null paths into NaN, which fsspec takes
            # for a URL, so only present keys are compared through it
            assert by_arrow.cat_file(key) == want, key
            n_keys += 1
    assert n_keys == sum(a.manifest.n_stored + a.manifest.n_inline for a in refs.arrays.values())
    for key, doc in refs.zmetadata().items():
        assert json.loads(by_json.cat_file(key)) == json.loads(by_parquet.cat_file(key)) == doc
    consolidated = [
        json.loads(fs.cat_file(".zmetadata"))["metadata"] for fs in (by_json, by_parquet)
    ]
    assert consolidated[0] == consolidated[1] == refs.zmetadata()
    for group in ("", "gt1l", "gt1l/heights", "ancillary_data"):
        listed = [_children(fs.ls(group, detail=False), group) for fs in (by_json, by_parquet)]
        assert listed[0] == listed[1], group


def _children(names: list[str], group: str) -> list[str]:
    # LazyReferenceMapper.ls strips the parent with str.lstrip (a character set), so it can also
    # list grandchildren ("ancillary_data/tiny/.zarray"); compare the direct children only
    depth = group.count("/") + 1 if group else 0
    return sorted(n for n in names if n.count("/") == depth)
