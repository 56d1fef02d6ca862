"""normalize_time: granules writing time in other units make one cube whose time decodes, value
for value, like xarray + h5netcdf on each file; whatever cannot be held exactly is refused."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.read import read_arrays
from h5sidecar.sample import write_daily_granule
from h5sidecar.workflows import build_cube, index_many
from h5sidecar.workflows.cube._cube_time import check_bounds, normalize_times
from tests.workflows.cube.test_cube import _assert_same, _reference
from tests.workflows.cube.test_cube_append import _read_everywhere

START = dt.date(2020, 1, 1)
#: (units, dtype) of each day: three spellings of the same kind of instant
UNITS = [("days since 2020-01-01 00:00:00", "f8"), ("hours since 2020-03-01", "f8"),
         ("seconds since 2019-12-31", "i8")]


def _granules(root: Path, specs: list[tuple[str, str]], first: int = 0,
              hour: float = 12.0) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i, (units, dtype) in enumerate(specs):
        day = START + dt.timedelta(days=first + i)
        out.append(write_daily_granule(root / f"tas_{day:%Y%m%d}.nc", day, time_units=units,
                                       time_dtype=dtype, hour=hour))
    return out


def _index(src: Path, dest: Path) -> Path:
    report = index_many(str(src), str(dest), executor="serial")
    assert all(g.status in ("ok", "up_to_date") for g in report.granules), report.granules
    return dest


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_differing_time_units_are_refused_or_normalized(tmp_path: Path, fmt: str) -> None:
    files = _granules(tmp_path / "nc", UNITS)
    with h5py.File(files[1]) as f:
        assert f["time"][0] == -1404.0  # really stored in other units
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    out = str(tmp_path / f"cube.{'parq' if fmt == 'parquet' else 'json'}")
    with pytest.raises(IncompatibleGranulesError, match=r"time.units differs.*hours since 2020-03"):
        build_cube(str(sidecars), out, format=fmt)
    build_cube(str(sidecars), out, format=fmt, normalize_time=True)
    raw = read_arrays(out, ["time"])["time"]
    np.testing.assert_array_equal(raw, [0.5, 1.5, 2.5])  # the first granule's units
    _read_everywhere(out, files)  # time and data equal h5netcdf on each file, concatenated

    given = str(tmp_path / "hours.parq")
    build_cube(str(sidecars), given, normalize_time=True, time_units="hours since 2020-01-01")
    with xr.open_dataset(given, engine="h5sidecar", chunks=None, decode_times=False) as ds:
        assert ds["time"].attrs["units"] == "hours since 2020-01-01"
        np.testing.assert_array_equal(ds["time"].values, [12.0, 36.0, 60.0])
    with xr.open_dataset(given, engine="h5sidecar", chunks=None) as ds:
        _assert_same(ds, _reference(files))


def test_inexact_normalization_is_refused(tmp_path: Path) -> None:
    # whole days as int32, then a granule at 06:00 written in hours: 0.25 day has no int32
    files = _granules(tmp_path / "nc", [("days since 2020-01-01", "i4")], hour=0.0)
    files += _granules(tmp_path / "nc", [("hours since 2020-01-01", "f8")], first=1, hour=6.0)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    with pytest.raises(IncompatibleGranulesError,
                       match=r"tas_20200102.nc .*cannot be written exactly in 'days since "
                             r"2020-01-01' as int32"):
        build_cube(str(sidecars), str(tmp_path / "cube.parq"), normalize_time=True)
    assert not (tmp_path / "cube.parq").exists()
    # in hours it is exact
    build_cube(str(sidecars), str(tmp_path / "cube.parq"), normalize_time=True,
               time_units="hours since 2020-01-01")
    _read_everywhere(str(tmp_path / "cube.parq"), files)


def test_append_in_other_units(tmp_path: Path) -> None:
    files = _granules(tmp_path / "nc", UNITS[:1])
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    out = str(tmp_path / "cube.parq")
    build_cube(str(sidecars), out)
    files += _granules(tmp_path / "nc", UNITS[1:], first=1)
    _index(tmp_path / "nc", sidecars)
    with pytest.raises(IncompatibleGranulesError, match=r"(?s)time.units differs.*normalize_time"):
        build_cube(str(sidecars), out, mode="append")
    result = build_cube(str(sidecars), out, mode="append", normalize_time=True)
    assert result.action == "appended" and len(result.added) == 2
    np.testing.assert_array_equal(read_arrays(out, ["time"])["time"], [0.5, 1.5, 2.5])
    _read_everywhere(out, files)


def test_calendar_packing_and_bounds_are_refused() -> None:
    days = np.array([0.5])
    with pytest.raises(IncompatibleGranulesError, match="calendar 'noleap'"):
        normalize_times([days], [{"units": "days since 2020-01-01", "calendar": "noleap"}],
                        ["g"], "time", units="hours since 2020-01-01", calendar="standard",
                        dtype=np.dtype("f8"))
    with pytest.raises(IncompatibleGranulesError, match="packed"):
        normalize_times([days], [{"units": "days since 2020-01-01", "scale_factor": 2.0}],
                        ["g"], "time", units="hours since 2020-01-01", calendar="standard",
                        dtype=np.dtype("f8"))
    with pytest.raises(IncompatibleGranulesError, match="time_bnds as its bounds"):
        check_bounds({"bounds": "time_bnds"}, {"time_bnds": {}}, "time")
    check_bounds({"bounds": "time_bnds"}, {"time_bnds": {"units": "days since 2020-01-01"}},
                 "time")  # bounds with their own units decode on their own


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3 specification")
def test_icechunk_cube_normalized_then_appended(tmp_path: Path) -> None:
    pytest.importorskip("icechunk")
    from h5sidecar.workflows import open_icechunk

    files = _granules(tmp_path / "nc", UNITS[:2])
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    repo_path = str(tmp_path / "cube.icechunk")
    build_cube(str(sidecars), repo_path, format="icechunk", normalize_time=True)
    files += _granules(tmp_path / "nc", UNITS[2:], first=2)
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), repo_path, format="icechunk", mode="append",
                        normalize_time=True)
    assert result.action == "appended" and result.added == (str(files[2]),)
    store = open_icechunk(repo_path).readonly_session("main").store
    with xr.open_zarr(store, consolidated=False) as ds:
        _assert_same(ds, _reference(files, widened=True))
    with xr.open_zarr(store, consolidated=False, decode_times=False) as ds:
        np.testing.assert_array_equal(ds["time"].values, [0.5, 1.5, 2.5])
