"""Combined references (GranuleRefs.members): each chunk is tied to its own source object."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from dask.base import tokenize

from h5sidecar.errors import ForbiddenSourceError
from h5sidecar.read import read_arrays
from h5sidecar.read._granule_fetch import make_fetcher
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import read_refs
from h5sidecar.settings import ReadSettings
from h5sidecar.workflows import build_cube, index_many


def _granule(path: Path, day: float, values: np.ndarray) -> Path:
    """Uncompressed chunks: a rewrite keeps every chunk's offset and length."""
    with h5py.File(path, "w") as f:
        t = f.create_dataset("time", data=[day], chunks=(1,), maxshape=(None,))
        t.attrs["units"] = "days since 2020-01-01"
        t.make_scale("time")
        v = f.create_dataset("v", data=values[None], chunks=(1, 4), maxshape=(None, 4))
        v.dims[0].attach_scale(t)
    return path


def _cube(src: Path, dest: Path, out: Path) -> str:
    report = index_many(str(src), str(dest), executor="serial")
    assert all(g.status in ("ok", "up_to_date") for g in report.granules)
    return build_cube(str(dest), str(out)).path


def test_rebuilt_cube_never_serves_a_replaced_members_cached_chunks(tmp_path: Path) -> None:
    src = tmp_path / "nc"
    src.mkdir()
    for i in range(3):
        _granule(src / f"g{i}.h5", i + 0.5, np.arange(4, dtype="i4") + 10 * i)
    cube = _cube(src, tmp_path / "sidecars", tmp_path / "cube.parq")
    first = read_arrays(cube, ["v"])["v"]  # fills the process-wide chunk cache
    token = tokenize(SidecarStore(cube))
    assert first[1].tolist() == [10, 11, 12, 13]
    before = read_refs(tmp_path / "sidecars" / "g1.h5.parq").arrays["v"].manifest.get((0, 0))
    with h5py.File(src / "g1.h5", "r+") as f:  # re-processed in place: same layout, new values
        f["v"][0] = [-1, -2, -3, -4]
    cube = _cube(src, tmp_path / "sidecars", tmp_path / "cube.parq")
    refs = read_refs(cube)
    assert refs.arrays["v"].manifest.get((1, 0)) == before  # the very same byte range
    assert tokenize(SidecarStore(cube)) != token  # nor reuses Dask results of the old cube
    assert refs.source == read_refs(tmp_path / "sidecars" / "g0.h5.parq").source  # unchanged
    with h5py.File(src / "g1.h5") as f:
        want = f["v"][0]
    got = read_arrays(cube, ["v"])["v"]
    np.testing.assert_array_equal(got[1], want)
    np.testing.assert_array_equal(got[[0, 2]], first[[0, 2]])


def test_allow_list_is_exactly_the_members(tmp_path: Path) -> None:
    src = tmp_path / "nc"
    src.mkdir()
    for i in range(2):
        _granule(src / f"g{i}.h5", i + 0.5, np.arange(4, dtype="i4"))
    _granule(tmp_path / "nc" / "g9.h5", 9.5, np.arange(4, dtype="i4"))
    refs = read_refs(_cube(src, tmp_path / "sidecars", tmp_path / "cube.parq"))
    urls = tuple(str(src / f"g{i}.h5") for i in (0, 1, 9))
    assert tuple(m.url for m in refs.members) == urls
    fetcher = make_fetcher(refs, ReadSettings(), None)
    for member in refs.members:  # each member allowed, checked against its own identity
        assert fetcher.allow_list.allows(member.url)
        assert fetcher._known.get(member.url) == member
    with pytest.raises(ForbiddenSourceError):
        fetcher.allow_list.check(str(tmp_path / "sidecars" / "g0.h5.parq"))
