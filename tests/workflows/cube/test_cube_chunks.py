"""Chunks along the concat axis: a shorter last granule is read right; a partial chunk before
another granule, or other chunk lengths, are refused (build and append): never misaligned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.workflows import build_cube, index_many


def _granule(path: Path, t0: int, n: int, chunk: int) -> Path:
    import netCDF4

    path.parent.mkdir(parents=True, exist_ok=True)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("time", None)
        nc.createDimension("y", 3)
        t = nc.createVariable("time", "f8", ("time",), chunksizes=(chunk,))
        t.units = "days since 2020-01-01"
        t[:] = np.arange(t0, t0 + n, dtype="f8")
        x = nc.createVariable("x", "i4", ("time", "y"), chunksizes=(chunk, 3), zlib=True)
        x[:] = np.arange(t0 * 3, (t0 + n) * 3, dtype="i4").reshape(n, 3)
    return path


def _index(src: Path, dest: Path) -> str:
    report = index_many(str(src), str(dest), executor="serial")
    assert all(g.status in ("ok", "up_to_date") for g in report.granules), report.granules
    return str(dest)


def _truth(files: list[Path]) -> xr.Dataset:
    parts = [xr.open_dataset(f, engine="h5netcdf").load() for f in files]
    return xr.concat(parts, "time")


def test_shorter_last_granule_reads_right(tmp_path: Path) -> None:
    files = [_granule(tmp_path / "nc" / "a.nc", 0, 4, 2),
             _granule(tmp_path / "nc" / "b.nc", 4, 3, 2)]
    out = build_cube(_index(tmp_path / "nc", tmp_path / "sc"), str(tmp_path / "cube.parq")).path
    with xr.open_dataset(out, engine="h5sidecar", chunks=None) as ds:
        want = _truth(files)
        np.testing.assert_array_equal(ds["x"].values, want["x"].values)
        np.testing.assert_array_equal(ds["time"].values, want["time"].values)
        assert ds.sizes["time"] == 7


def test_partial_chunk_before_another_granule_is_refused(tmp_path: Path) -> None:
    _granule(tmp_path / "nc" / "a.nc", 0, 3, 2)  # last chunk half full, and b follows
    _granule(tmp_path / "nc" / "b.nc", 3, 4, 2)
    with pytest.raises(IncompatibleGranulesError,
                       match=r"x in .*a.nc has 3 values along 'time', not a multiple of its chunk"):
        build_cube(_index(tmp_path / "nc", tmp_path / "sc"), str(tmp_path / "cube.parq"))
    assert not (tmp_path / "cube.parq").exists()


def test_other_chunk_lengths_are_refused(tmp_path: Path) -> None:
    _granule(tmp_path / "nc" / "a.nc", 0, 4, 2)
    _granule(tmp_path / "nc" / "b.nc", 4, 4, 1)
    with pytest.raises(IncompatibleGranulesError, match=r"(?s)x.chunks differs: \[2, 3\] in .*a.nc"
                       r".*\[1, 3\] in .*b.nc"):
        build_cube(_index(tmp_path / "nc", tmp_path / "sc"), str(tmp_path / "cube.parq"))


@pytest.mark.parametrize("fmt", ["parquet", "icechunk"])
@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3 specification")
def test_append_after_a_shorter_last_granule_is_refused(tmp_path: Path, fmt: str) -> None:
    if fmt == "icechunk":
        pytest.importorskip("icechunk")
    _granule(tmp_path / "nc" / "a.nc", 0, 4, 2)
    _granule(tmp_path / "nc" / "b.nc", 4, 3, 2)  # partial last chunk: fine while last
    dest = _index(tmp_path / "nc", tmp_path / "sc")
    out = str(tmp_path / ("cube.parq" if fmt == "parquet" else "cube.icechunk"))
    build_cube(dest, out, format=fmt)
    _granule(tmp_path / "nc" / "c.nc", 7, 2, 2)
    _index(tmp_path / "nc", tmp_path / "sc")
    with pytest.raises(IncompatibleGranulesError,
                       match=r"x in .*b.nc.*(not a multiple of its chunk|ends inside a chunk)"):
        build_cube(dest, out, format=fmt, mode="append")
    if fmt == "parquet":
        with xr.open_dataset(out, engine="h5sidecar", chunks=None) as ds:
            assert ds.sizes["time"] == 7  # the cube is untouched
