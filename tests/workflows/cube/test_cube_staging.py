"""A build's pieces staged on disk and joined a piece at a time equal concat_refs of them.

Granules written with h5py whose arrays exercise what the join must place exactly: the concat
dimension first (``a``) and not first (``b``), checksums, and a granule with no stored chunk
of an array (``c``, never written: its URL is left out of that array's URL table).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.references import concat_refs, read_refs
from h5sidecar.workflows import build_cube, index_many
from h5sidecar.workflows.cube import _cube_batches
from h5sidecar.workflows.cube._cube_staging import Staging, join_staged

DAYS = 3


def _granule(path: Path, day: int, *, write_c: bool = True) -> None:
    with h5py.File(path, "w") as f:
        t = f.create_dataset("time", data=np.array([2 * day, 2 * day + 1], "f8"))
        t.make_scale("time")
        t.attrs["units"] = "days since 2000-01-01"
        x = f.create_dataset("x", data=np.arange(3, dtype="f4"))
        x.make_scale("x")
        a = f.create_dataset("a", data=np.arange(6, dtype="i4").reshape(2, 3) + 10 * day,
                             chunks=(1, 3))
        b = f.create_dataset("b", data=np.arange(6, dtype="f4").reshape(3, 2) - day,
                             chunks=(3, 1))
        y = f.create_dataset("y", data=np.arange(1000, dtype="i4"))
        y.make_scale("y")
        # large enough not to be held inline: a granule's chunks are byte ranges or missing
        c = f.create_dataset("c", shape=(2, 1000), dtype="f8", chunks=(1, 1000), fillvalue=-7)
        c.attrs["_FillValue"] = np.float64(-7)  # as HDF5's: never-written chunks stay missing
        if write_c:
            c[:] = np.random.default_rng(day).random((2, 1000))
        for d, dims in ((a, ("time", "x")), (b, ("x", "time")), (c, ("time", "y"))):
            for i, name in enumerate(dims):
                d.dims[i].attach_scale(f[name])


@pytest.fixture(scope="module")
def sidecars(tmp_path_factory) -> tuple[list[Path], Path]:
    root = tmp_path_factory.mktemp("staged")
    (root / "src").mkdir()
    files = []
    for day in range(DAYS):
        files.append(root / "src" / f"g{day}.h5")
        _granule(files[-1], day, write_c=day != 1)
    report = index_many(str(root / "src"), str(root / "dest"), executor="serial",
                        checksums=True)
    assert all(g.status == "ok" for g in report.granules), report.granules
    return files, root / "dest"


def _bare(path: Path):
    refs = read_refs(str(path))
    return type(refs)(refs.source, refs.groups,
                      {p: a for p, a in refs.arrays.items() if p not in ("time", "x", "y")},
                      refs.skipped, refs.extra)


def test_joined_pieces_equal_concat_refs(sidecars, tmp_path: Path) -> None:
    _, dest = sidecars
    parts = [_bare(p) for p in sorted(dest.glob("*.h5.parq"))]
    names = [[p.source.url] for p in parts]
    want = concat_refs(parts, "time")
    with Staging(str(tmp_path / "cube.parq")) as staging:
        folder = Path(staging.folder)
        assert folder.parent == tmp_path and folder.name.startswith(".cube.parq.")
        got = join_staged([staging.stage(p, "time") for p in parts], names, "time")
    assert not folder.exists()
    assert list(got.arrays) == list(want.arrays)
    for path, arr in want.arrays.items():
        assert got.arrays[path].meta == arr.meta, path
        assert got.arrays[path].manifest == arr.manifest, path
        assert np.array_equal(got.arrays[path].checksums, arr.checksums), path
    # granule 1 wrote no chunk of c: only the other two granules' URLs are c's
    assert got.arrays["c"].manifest.urls == (parts[0].source.url, parts[2].source.url)
    assert len(got.arrays["a"].manifest.urls) == DAYS


def test_staged_build_reads_as_h5py(sidecars, tmp_path: Path, monkeypatch) -> None:
    files, dest = sidecars
    monkeypatch.setattr(_cube_batches, "BATCH", 1)  # a piece a granule
    cube = build_cube(str(dest), str(tmp_path / "cube.parq"))
    assert not list(tmp_path.glob(".*.tmp"))  # the staging folder is gone
    with xr.open_dataset(cube.path, engine="h5sidecar", chunks=None,
                         mask_and_scale=False, decode_times=False) as ds:
        for name in ("a", "b", "c"):
            want = []
            for f in files:
                with h5py.File(f, "r") as h:
                    want.append(h[name][...])
            axis = 1 if name == "b" else 0
            np.testing.assert_array_equal(ds[name].values, np.concatenate(want, axis=axis))


def test_staging_is_removed_when_a_build_fails(sidecars, tmp_path: Path, monkeypatch) -> None:
    _, dest = sidecars
    monkeypatch.setattr(_cube_batches, "BATCH", 1)
    monkeypatch.setattr("h5sidecar.workflows.cube._cube_build.join_staged",
                        _raise_incompatible)
    with pytest.raises(IncompatibleGranulesError, match="refused here"):
        build_cube(str(dest), str(tmp_path / "cube.parq"))
    # only the cube's writer lock stays (hidden; see _cube_lock), no staging and no cube
    assert [p.name for p in tmp_path.iterdir()] == [".cube.parq.lock"]


def _raise_incompatible(*args: object, **kwargs: object) -> None:
    raise IncompatibleGranulesError("refused here")


def test_a_staged_piece_reads_back_as_it_was(tmp_path: Path) -> None:
    """A piece's arrays go through an Arrow IPC file (no pickle) and come back equal: inline
    chunks (text and binary), a missing chunk, checksums, note and status; the arrays
    without the dimension stay in memory."""
    from tests.references.test_json import small_refs

    refs = small_refs()  # g/v: (y, x) with inline, missing and checksums; s: 0-d
    with Staging(str(tmp_path / "cube.parq")) as staging:
        staged = staging.stage(refs, "y")
        assert Path(staged.file).read_bytes()[:6] == b"ARROW1"
        got = staged.load()
    assert list(got) == ["g/v"] and got["g/v"] == refs.arrays["g/v"]
    assert dict(got["g/v"].manifest.inline) == dict(refs.arrays["g/v"].manifest.inline)
    assert staged.rest.arrays == {"s": refs.arrays["s"]} and staged.order == ("g/v", "s")
