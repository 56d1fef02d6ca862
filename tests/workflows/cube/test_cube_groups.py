"""build_cube on a group of HDF5 granules; differing time units and partial chunks refused."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.errors import IncompatibleGranulesError, InvalidRequestError
from h5sidecar.workflows import build_cube, index_many


def _granule(path: Path, times: list[float], *, units: str = "days since 2020-01-01",
             chunk: int = 1) -> Path:
    """Group ``g``: ``time`` (dimension scale) and ``v`` (time, 4) gzip-chunked; root ``other``."""
    with h5py.File(path, "w") as f:
        f.create_dataset("other", data=np.arange(3))
        g = f.create_group("g")
        g.attrs["title"] = path.name
        t = g.create_dataset("time", data=np.asarray(times, "f8"), chunks=(chunk,),
                             maxshape=(None,))
        t.attrs["units"] = units
        t.make_scale("time")
        v = g.create_dataset("v", data=np.outer(times, [1.0, 2.0, 3.0, 4.0]).astype("f4"),
                             chunks=(chunk, 4), maxshape=(None, 4), compression="gzip")
        v.dims[0].attach_scale(t)
    return path


def _index(src: Path, dest: Path) -> str:
    report = index_many(str(src), str(dest), executor="serial")
    assert all(g.status == "ok" for g in report.granules)
    return str(dest)


def test_group_cube_matches_h5py(tmp_path: Path) -> None:
    src = tmp_path / "h5"
    src.mkdir()
    files = [_granule(src / "late.h5", [4.0, 5.0]), _granule(src / "early.h5", [1.0, 2.0]),
             _granule(src / "last.h5", [7.0, 8.0, 9.0])]  # the longest comes last
    dest = _index(src, tmp_path / "sc")
    with pytest.raises(InvalidRequestError, match="no 1-D coordinate variable 'time'"):
        build_cube(dest, str(tmp_path / "root.json"), format="json")
    out = build_cube(dest, str(tmp_path / "cube.json"), group="g", format="json").path
    with xr.open_dataset(out, engine="h5sidecar", group="g", chunks=None,
                         decode_times=False) as ds:
        want_v, want_t = [], []
        for f in (files[1], files[0], files[2]):
            with h5py.File(f) as h:
                want_v.append(h["g/v"][...])
                want_t.append(h["g/time"][...])
        np.testing.assert_array_equal(ds["time"].values, np.concatenate(want_t))
        np.testing.assert_array_equal(ds["v"].values, np.concatenate(want_v))
        assert ds.attrs["title"] == "early.h5"  # group attributes: the first granule's


def test_partial_chunk_and_time_units_are_refused(tmp_path: Path) -> None:
    src = tmp_path / "h5"
    src.mkdir()
    _granule(src / "a.h5", [1.0, 2.0, 3.0], chunk=2)  # 3 steps in chunks of 2: partial
    _granule(src / "b.h5", [4.0, 5.0], chunk=2)
    dest = _index(src, tmp_path / "sc")
    with pytest.raises(IncompatibleGranulesError, match=r"a\.h5 has 3 values along 'time'"):
        build_cube(dest, str(tmp_path / "cube.parq"), group="g")
    src2 = tmp_path / "h5u"
    src2.mkdir()
    _granule(src2 / "a.h5", [1.0])
    _granule(src2 / "b.h5", [1.0], units="days since 2020-01-02")
    with pytest.raises(IncompatibleGranulesError,
                       match=r"g/time.units differs: .*2020-01-01.* in .*a\.h5.*2020-01-02"):
        build_cube(_index(src2, tmp_path / "sc2"), str(tmp_path / "c.parq"), group="g")
