"""H5SidecarFileSystem: differential against fsspec's ReferenceFileSystem, zarr reads, batching."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
import zarr
from zarr.storage import FsspecStore

from h5sidecar.read.zarr.filesystem import H5SidecarFileSystem
from h5sidecar.references import GranuleRefs
from tests._granules import read_h5, refs_for, source_bytes


def _is_document(key: str) -> bool:
    return key.rpartition("/")[2].startswith(".")


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_every_key_matches_fsspec_reference_filesystem(
    fmt: str, small_sidecars: dict[str, str], small_refs: GranuleRefs
) -> None:
    ours = fsspec.filesystem("h5sidecar", fo=small_sidecars[fmt])
    assert isinstance(ours, H5SidecarFileSystem)
    # (remote_protocol given: without it fsspec guesses it by iterating a Parquet sidecar's
    # fields, which fails on nested groups in random order)
    plain = fsspec.filesystem("reference", fo=small_sidecars[fmt], remote_protocol="file")
    keys = sorted(ours.find(""))
    assert len(keys) > 40
    if fmt == "json":  # (fsspec's lazy Parquet mapper cannot list nested groups)
        assert keys == sorted(plain.find(""))
    absent = ["ancillary_data/sparse/1.1", "gt1l/heights/h_ph/5"]
    for key in absent:  # unstored chunks and keys outside the grid: absent in both
        assert not ours.exists(key)
        with pytest.raises((FileNotFoundError, KeyError, IndexError)):  # fsspec's own choices
            plain.cat_file(key)
    mine, theirs = ours.cat(keys), plain.cat(keys)
    for key in keys:
        if key == ".zmetadata":  # Parquet's also holds record_size and our extras
            assert json.loads(mine[key])["metadata"] == json.loads(theirs[key])["metadata"]
        elif _is_document(key):  # same documents (JSON formatting may differ between formats)
            assert json.loads(mine[key]) == json.loads(theirs[key]), key
        else:
            assert mine[key] == theirs[key], key
            assert mine[key] == source_bytes(small_refs, key), key


def test_zarr_over_the_filesystem_equals_h5py(
    small_sidecars: dict[str, str], small_refs: GranuleRefs, small_h5: Path
) -> None:
    fs = H5SidecarFileSystem(small_sidecars["parquet"], asynchronous=True)
    root = zarr.open_group(FsspecStore(fs, read_only=True, path=""), mode="r")
    for path in small_refs.arrays:
        np.testing.assert_array_equal(root[path][...], read_h5(small_h5, path))
    mapper = fsspec.filesystem("h5sidecar", fo=small_sidecars["json"]).get_mapper("")
    root = zarr.open_group(mapper, mode="r")
    np.testing.assert_array_equal(
        root["gt1l/heights/h_ph"][:], read_h5(small_h5, "gt1l/heights/h_ph")
    )


def test_batched_reads_are_one_fetch(small_refs: GranuleRefs) -> None:
    fs = H5SidecarFileSystem(small_refs)
    calls: list[int] = []
    real = fs.fetcher.fetch

    async def counting(requests: Any) -> Any:
        calls.append(len(requests))
        return await real(requests)

    fs.fetcher.fetch = counting  # type: ignore[method-assign]
    keys = [f"gt1l/heights/h_ph/{i}" for i in range(5)] + ["gt1l/heights/delta_time/0"]
    out = fs.cat(keys)
    assert calls == [6]
    assert out == {k: source_bytes(small_refs, k) for k in keys}
    # neighbouring chunks of one object coalesce into few requests
    assert fs.stats["requests"] < 6

    parts = fs.cat_ranges(keys[:3], [0, 10, -4], [8, None, None])
    assert calls == [6, 3]
    whole = [source_bytes(small_refs, k) for k in keys[:3]]
    assert parts == [whole[0][:8], whole[1][10:], whole[2][-4:]]


def test_listing_info_and_errors(small_refs: GranuleRefs) -> None:
    fs = H5SidecarFileSystem(small_refs)
    assert fs.ls("", detail=False) == [".zattrs", ".zgroup", ".zmetadata", "ancillary_data", "gt1l"]
    assert fs.isdir("gt1l/heights") and fs.isfile("gt1l/heights/h_ph/0")
    assert fs.info("h5sidecar://gt1l/heights/h_ph/1")["size"] == int(
        small_refs.arrays["gt1l/heights/h_ph"].manifest.lengths[1]
    )
    assert not fs.exists("ancillary_data/sparse/1.1")  # unstored chunk: absent, reads as fill
    with pytest.raises(FileNotFoundError):
        fs.cat_file("gt1l/heights/h_ph/99")
    assert fs.cat(["gt1l/heights/h_ph/99", ".zgroup"], on_error="omit") == {
        ".zgroup": b'{"zarr_format":2}'
    }
    with fs.open("gt1l/heights/h_ph/.zarray") as f:
        assert json.load(f)["chunks"] == [1000]
    with pytest.raises(PermissionError, match="read-only"):
        fs.open("gt1l/x", mode="wb")
    with pytest.raises(NotImplementedError):
        fs.pipe_file("gt1l/x", b"data")


def test_s3_sidecar_and_source_pickle_without_credentials(
    small_h5: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    from h5sidecar.references import write_refs

    url = f"s3://{s3_bucket}/g/small.h5"
    s3.put(str(small_h5), url)
    refs = refs_for(url, storage_options=s3_storage_options)
    sidecar = write_refs(
        refs, f"s3://{s3_bucket}/s/small.h5.parq", storage_options=s3_storage_options
    )
    secret = {**s3_storage_options, "secret": "fs-s3cr3t-never-pickled"}
    fs = fsspec.filesystem("h5sidecar", fo=sidecar, target_options=secret, remote_options=secret)
    root = zarr.open_group(fs.get_mapper(""), mode="r")
    np.testing.assert_array_equal(
        root["gt1l/geolocation/records"][:], read_h5(small_h5, "gt1l/geolocation/records")
    )
    blob = pickle.dumps(fs)
    assert b"fs-s3cr3t" not in blob
    clone = pickle.loads(blob)
    assert clone.cat_file("gt1l/heights/h_ph/3") == fs.cat_file("gt1l/heights/h_ph/3")
