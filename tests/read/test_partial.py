"""One bad chunk: by default it fails the whole read; with ``errors="collect"`` every other
array is read (equal to h5py) and the bad one is reported with its own error."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.errors import ChunkDecodeError
from h5sidecar.workflows import index_many
from tests._granules import read_h5, write_small_granule

GROUP = "gt1l/heights"
BAD = f"{GROUP}/h_ph"
GOOD = (f"{GROUP}/delta_time", f"{GROUP}/quality_ph", f"{GROUP}/lat_ph")


def _corrupt_one_chunk(path: Path, name: str) -> None:
    """Overwrite the middle of ``name``'s second chunk in place (the indexer reads metadata,
    not chunk data, so a granule corrupted before indexing has a sidecar whose references are
    right and one chunk that cannot be decoded; after indexing, the change time would make the
    granule stale instead)."""
    with h5py.File(path) as f:
        info = f[name].id.get_chunk_info(1)
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(info.byte_offset + 4)
        fh.write(b"\xff" * max(1, info.size - 8))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture(scope="module", params=["json", "parquet"])
def bad_granule(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp(f"partial-{request.param}")
    good = write_small_granule(root / "good.h5")
    src = root / "src"
    src.mkdir()
    h5 = src / "g.h5"
    shutil.copy2(good, h5)
    _corrupt_one_chunk(h5, BAD)
    report = index_many(str(src), str(root / "dest"), format=request.param, executor="serial")
    assert report.ok
    return good, h5, report.granules[0].sidecar


def test_read_arrays_fails_whole_by_default(bad_granule: tuple[Path, Path, str]) -> None:
    _, _, sidecar = bad_granule
    with pytest.raises(ChunkDecodeError):
        h5sidecar.read_arrays(sidecar, [*GOOD, BAD])


def test_read_arrays_collects_the_bad_array(bad_granule: tuple[Path, Path, str]) -> None:
    good, h5, sidecar = bad_granule
    out = h5sidecar.read_arrays(sidecar, [*GOOD, BAD], errors="collect")
    assert isinstance(out, h5sidecar.read.ArraysRead)
    assert sorted(out) == sorted(GOOD)
    assert list(out.errors) == [BAD] and isinstance(out.errors[BAD], ChunkDecodeError)
    for name in GOOD:
        np.testing.assert_array_equal(out[name], read_h5(h5, name), err_msg=name)
    # a selection of the bad array that avoids the bad chunk reads fine
    first = h5sidecar.read_arrays(sidecar, {BAD: slice(0, 1000)}, errors="collect")
    assert not first.errors
    np.testing.assert_array_equal(first[BAD], read_h5(good, BAD)[:1000])
    # with CF decoding too
    decoded = h5sidecar.read_arrays(sidecar, [*GOOD, BAD], errors="collect", mask_and_scale=True)
    assert list(decoded.errors) == [BAD] and sorted(decoded) == sorted(GOOD)


def test_load_collects_per_variable(bad_granule: tuple[Path, Path, str]) -> None:
    _, h5, sidecar = bad_granule
    with xr.open_dataset(sidecar, engine="h5sidecar", group=GROUP, decode_cf=False,
                         chunks=None) as ds:
        with pytest.raises(ChunkDecodeError):
            h5sidecar.load(ds.copy())
        failed = h5sidecar.load(ds, errors="collect")
        assert list(failed) == ["h_ph"] and isinstance(failed["h_ph"], ChunkDecodeError)
        for name in ("quality_ph", "lat_ph", "delta_time"):
            assert ds[name].variable._in_memory, name
            np.testing.assert_array_equal(ds[name].values, read_h5(h5, f"{GROUP}/{name}"))
    tree = h5sidecar.open_datatree(sidecar, chunks=None, decode_cf=False)
    failed = h5sidecar.load(tree[GROUP], errors="collect")
    assert list(failed) == [BAD]
    np.testing.assert_array_equal(tree[GROUP]["quality_ph"].values,
                                  read_h5(h5, f"{GROUP}/quality_ph"))


def test_load_collects_under_dask(bad_granule: tuple[Path, Path, str]) -> None:
    _, h5, sidecar = bad_granule
    with xr.open_dataset(sidecar, engine="h5sidecar", group=GROUP, decode_cf=False,
                         chunks={}) as ds:
        failed = h5sidecar.load(ds, errors="collect")
        assert list(failed) == ["h_ph"]
        np.testing.assert_array_equal(ds["quality_ph"].values, read_h5(h5, f"{GROUP}/quality_ph"))


def test_errors_must_be_known(bad_granule: tuple[Path, Path, str]) -> None:
    with pytest.raises(ValueError, match="'raise' or 'collect'"):
        h5sidecar.read_arrays(bad_granule[2], list(GOOD), errors="ignore")  # type: ignore[arg-type]


def test_load_of_a_tree_with_a_big_endian_compound(tmp_path: Path) -> None:
    """xarray's NativeEndiannessArray (a compound with a big-endian field) has no async path:
    ``load`` reads it in a thread, so the user gets xarray's own error for it -- the one
    xarray + h5netcdf gives on the file -- not a bare NotImplementedError."""
    src = tmp_path / "src"
    src.mkdir()
    h5 = write_small_granule(src / "g.h5")
    report = index_many(str(src), str(tmp_path / "dest"), format="json", executor="serial")
    with pytest.raises(TypeError) as h5netcdf_error:
        _ = xr.open_dataset(h5, engine="h5netcdf", group="gt1l/geolocation",
                            phony_dims="sort")["records"].values
    tree = h5sidecar.open_datatree(report.granules[0].sidecar, chunks=None)
    with pytest.raises(TypeError) as ours:
        h5sidecar.load(tree)
    assert str(ours.value) == str(h5netcdf_error.value)
    # every other read ran to its end before load raised: nothing swaps data in afterwards
    # (a read left running once raced the next load() over the same variables)
    loaded = {n: v._in_memory for n, v in tree[GROUP].dataset.variables.items()}
    assert loaded and all(loaded.values()), loaded
    h5sidecar.load(tree[GROUP])  # the groups without it load
    np.testing.assert_array_equal(tree[GROUP]["h_ph"].values, read_h5(h5, BAD))
