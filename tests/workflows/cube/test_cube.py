"""build_cube: daily granules -> one datacube, read by h5sidecar and by plain xarray/fsspec."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.cli import main
from h5sidecar.errors import IncompatibleGranulesError, StaleReferenceError
from h5sidecar.read import read_arrays
from h5sidecar.references import read_refs
from h5sidecar.sample import write_daily_collection, write_daily_granule
from h5sidecar.workflows import build_cube, index_many
from h5sidecar.workflows.checks._cfcheck import open_truth

DAYS = 5


def _index(src: Path, dest: Path) -> Path:
    report = index_many(str(src), str(dest), executor="serial")
    assert all(g.status in ("ok", "up_to_date") for g in report.granules), report.granules
    return dest


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> tuple[list[Path], Path]:
    """Daily granules (+ the repacked one) and their sidecars."""
    root = tmp_path_factory.mktemp("daily")
    files = write_daily_collection(root / "nc", days=DAYS, mixed_packing=True)
    return files, _index(root / "nc", root / "sidecars")


def _reference(files: list[Path], *, widened: bool = False) -> xr.Dataset:
    """What xarray + h5netcdf read from the files, in time order.

    ``widened``: unpacked with float64 packing attributes, as plain Zarr readers do (JSON
    attributes carry no float32; see :func:`h5sidecar.workflows.checks._cfcheck.open_truth`).
    """
    if widened:
        parts = [open_truth(f, "")[1] for f in files]
        return xr.concat(parts, "time", data_vars="minimal", coords="minimal",
                         compat="override").sortby("time").load()
    with xr.open_mfdataset(files, engine="h5netcdf", combine="nested", concat_dim="time",
                           data_vars="minimal", coords="minimal", compat="override") as ds:
        return ds.sortby("time").load()


def _assert_same(cube: xr.Dataset, ref: xr.Dataset) -> None:
    assert list(cube["time"].values) == list(ref["time"].values)
    for name in ("tas", "pr", "lat", "lon"):
        got, want = cube[name].load(), ref[name]
        assert got.dims == want.dims
        np.testing.assert_array_equal(got.values, want.values)  # NaNs compare equal
    assert np.isnan(cube["tas"].values).any()  # fill cells were masked, not read as numbers


def _assert_raw_matches_h5py(cube_path: str, files: list[Path]) -> None:
    """Raw (packed) values through the read path equal h5py's, file after file."""
    raw = read_arrays(cube_path, ["tas", "time"])
    want_tas, want_time = [], []
    for f in files:
        with h5py.File(f) as h:
            want_tas.append(h["tas"][...])
            want_time.append(h["time"][...])
    order = np.argsort(np.concatenate(want_time))
    np.testing.assert_array_equal(raw["time"], np.concatenate(want_time)[order])
    np.testing.assert_array_equal(raw["tas"], np.concatenate(want_tas)[order])


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_cube_reads_like_the_files(collection, tmp_path: Path, fmt: str) -> None:
    files, sidecars = collection
    regular = [f for f in files if "repacked" not in f.name]
    with pytest.raises(IncompatibleGranulesError) as info:
        build_cube(str(sidecars), str(tmp_path / "refused"), format=fmt)
    text = str(info.value)
    assert "tas.scale_factor differs" in text and "tas_20200106_repacked.nc" in text
    assert "0.019999" in text and "0.0099999" in text
    assert not (tmp_path / "refused").exists()

    out = tmp_path / f"cube.{'parq' if fmt == 'parquet' else 'json'}"
    split = build_cube(str(sidecars), str(out), format=fmt, on_mismatch="split")
    assert len(split.cubes) == 2
    first, second = split.cubes
    assert first.path.endswith(f"cube-0.{out.suffix[1:]}") and len(first.granules) == DAYS
    assert second.granules == (str(files[-1]),) and first.last < second.first
    refs = read_refs(first.path)
    assert [m.url for m in refs.members] == [str(f) for f in regular]
    assert refs.arrays["time"].manifest.n_stored == 0  # opening reads no source

    ref = _reference(regular)
    for chunks in (None, {}):
        with xr.open_dataset(first.path, engine="h5sidecar", chunks=chunks) as ds:
            assert ds.sizes["time"] == DAYS
            _assert_same(ds, ref)
    so = {"fo": first.path, "remote_protocol": "file"}
    with xr.open_dataset("reference://", engine="zarr",
                         backend_kwargs={"consolidated": False, "storage_options": so}) as ds:
        _assert_same(ds, _reference(regular, widened=True))
    _assert_raw_matches_h5py(first.path, regular)
    with xr.open_dataset(second.path, engine="h5sidecar", chunks=None) as ds:
        _assert_same(ds, _reference(files[-1:]))  # decoded with its own packing


def test_cube_orders_by_time_not_name(tmp_path: Path) -> None:
    files = write_daily_collection(tmp_path / "nc", days=4)
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    for name, f in zip(["d.nc", "a.nc", "c.nc", "b.nc"], files, strict=True):
        shutil.copy(f, shuffled / name)
    sidecars = _index(shuffled, tmp_path / "sidecars")
    result = build_cube(str(sidecars), str(tmp_path / "cube.parq"))
    assert [Path(g).name for g in result.cubes[0].granules] == [
        "d.nc", "a.nc", "c.nc", "b.nc"]
    with xr.open_dataset(result.path, engine="h5sidecar", chunks=None) as ds:
        _assert_same(ds, _reference(files))
    before = (tmp_path / "cube.parq" / ".zmetadata").read_bytes()
    build_cube(str(sidecars), str(tmp_path / "cube.parq"))  # idempotent
    assert (tmp_path / "cube.parq" / ".zmetadata").read_bytes() == before
    for _ in range(2):  # a cube written into DEST is not a granule of the next run
        build_cube(str(sidecars), str(sidecars / "cube.parq"))
        assert (sidecars / "cube.parq" / ".zmetadata").read_bytes() == before


def test_overlapping_granules_are_refused(tmp_path: Path) -> None:
    files = write_daily_collection(tmp_path / "nc", days=3)
    shutil.copy(files[1], tmp_path / "nc" / "copy_of_day2.nc")
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    with pytest.raises(IncompatibleGranulesError, match=r"copy_of_day2.nc.*overlap along time"):
        build_cube(str(sidecars), str(tmp_path / "cube.json"), format="json")


def test_replaced_member_is_stale(tmp_path: Path) -> None:
    files = write_daily_collection(tmp_path / "nc", days=3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    path = build_cube(str(sidecars), str(tmp_path / "cube.parq"), variables=["tas"]).path
    with xr.open_dataset(path, engine="h5sidecar", chunks=None) as ds:
        assert set(ds.data_vars) == {"tas"}
        np.testing.assert_array_equal(ds["tas"].values, _reference(files)["tas"].values)
    # the middle day is re-processed (other values, same name): its old references are stale
    write_daily_granule(files[1], __import__("datetime").date(2020, 1, 2), seed=99)
    with xr.open_dataset(path, engine="h5sidecar", chunks=None) as ds:
        ds["tas"].isel(time=0).load()  # an unchanged member still reads
        with pytest.raises(StaleReferenceError):
            ds["tas"].load()


def test_cli_cube(collection, tmp_path: Path, capsys) -> None:
    files, sidecars = collection
    out = tmp_path / "cube.json"
    assert main(["cube", str(sidecars), "-o", str(out), "--format", "json"]) == 2
    assert "tas_20200106_repacked.nc" in capsys.readouterr().err
    assert main(["cube", str(sidecars), "-o", str(out), "--format", "json",
                 "--on-mismatch", "split"]) == 0
    assert "cube-1.json" in capsys.readouterr().out
    # only the selected variables must agree: pr is packed alike in every granule
    assert main(["cube", str(sidecars), "-o", str(out), "--format", "json",
                 "--variables", "pr"]) == 0
    with xr.open_dataset(out, engine="h5sidecar", chunks=None) as ds:
        assert set(ds.data_vars) == {"pr"} and ds.sizes["time"] == DAYS + 1
        np.testing.assert_array_equal(ds["pr"].values, _reference(files)["pr"].values)
    assert main(["cube", str(sidecars), "-o", str(out), "--concat-dim", "nope"]) == 2


def test_cube_on_s3(tmp_path: Path, s3, s3_bucket: str, s3_storage_options) -> None:
    files = write_daily_collection(tmp_path / "nc", days=3, nlat=4, nlon=6)
    for f in files:
        s3.put(str(f), f"{s3_bucket}/nc/{f.name}")
    dest = f"s3://{s3_bucket}/sidecars"
    report = index_many(f"s3://{s3_bucket}/nc", dest, storage_options=s3_storage_options,
                        executor="serial")
    assert all(g.status == "ok" for g in report.granules)
    out = f"s3://{s3_bucket}/cube.parq"
    result = build_cube(dest, out, storage_options=s3_storage_options)
    assert result.path == out
    with xr.open_dataset(out, engine="h5sidecar", chunks=None,
                         storage_options=s3_storage_options,
                         remote_options=s3_storage_options) as ds:
        _assert_same(ds, _reference(files))


def test_cli_sample_collection(tmp_path: Path) -> None:
    assert main(["sample", str(tmp_path), "--collection", "--days", "2"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["tas_20200101.nc", "tas_20200102.nc", "tas_20200103_repacked.nc"]
    with h5py.File(tmp_path / "tas_20200103_repacked.nc") as f:
        assert float(f["tas"].attrs["scale_factor"][0]) == pytest.approx(0.02)
        assert (f["tas"][...] == -32767).any()  # fill cells


def test_open_reads_no_source_and_grids_must_agree(tmp_path: Path) -> None:
    from h5sidecar.read.zarr.store import SidecarStore

    files = write_daily_collection(tmp_path / "nc", days=3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    path = build_cube(str(sidecars), str(tmp_path / "cube.parq")).path
    store = SidecarStore(path)
    with xr.open_dataset(store, engine="h5sidecar", chunks={}) as ds:
        np.testing.assert_array_equal(ds["lat"].values, _reference(files)["lat"].values)
        assert ds.indexes["time"].size == 3
        assert store.fetcher.stats.requests == 0  # time, lat and lon are held in the cube
    with h5py.File(files[2], "r+") as f:  # another grid, same shape
        f["lat"][0] = -61.0
    _index(tmp_path / "nc", tmp_path / "sidecars")
    with pytest.raises(IncompatibleGranulesError, match=r"lat holds other values in .*tas_20200103"):
        build_cube(str(sidecars), str(tmp_path / "cube.parq"))


# zarr flags the numcodecs codecs of HDF5 filters as outside the Zarr v3 spec (they are ours)
@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3 specification")
def test_cube_as_icechunk_reads_like_the_files(tmp_path: Path) -> None:
    """``format="icechunk"``: the same cube as a commit; a rebuild is a new commit; a replaced
    member is refused by Icechunk's checksum, never read."""
    pytest.importorskip("icechunk")
    from h5sidecar.workflows import open_icechunk

    files = write_daily_collection(tmp_path / "nc", days=3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    repo_path = tmp_path / "cube.icechunk"
    result = build_cube(str(sidecars), str(repo_path), format="icechunk")
    assert result.path == str(repo_path) and len(result.cubes[0].granules) == 3
    repo = open_icechunk(str(repo_path))
    with xr.open_zarr(repo.readonly_session("main").store, consolidated=False) as ds:
        _assert_same(ds, _reference(files, widened=True))

    assert main(["cube", str(sidecars), "-o", str(repo_path), "--format", "icechunk"]) == 0
    repo = open_icechunk(str(repo_path))
    messages = [s.message for s in repo.ancestry(branch="main")]
    assert sum("h5sidecar cube: 3 granules" in m for m in messages) == 2

    later = files[0].stat().st_mtime + 5  # same bytes, a later modification: the member changed
    os.utime(files[0], (later, later))
    with xr.open_zarr(repo.readonly_session("main").store, consolidated=False) as ds, \
            pytest.raises(Exception, match=r"(?i)checksum|modified"):
        ds["tas"].load()
