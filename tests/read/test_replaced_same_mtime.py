"""A source replaced by a file of the same size *and* mtime is a change (issue 28, item 3).

``os.replace`` followed by ``os.utime``, a restore from backup, ``cp -p``, a sync tool that keeps
mtimes: size and mtime alone call the new file the old one.  The cached readers (``read_arrays``,
the engine, cubes) then kept serving the old file's chunks while the ``h5sidecar://`` filesystem
returned the new file's: readers of one process disagreed.  Sidecars record a local file's inode
and change time now, and every reader of a process compares with what any of them last saw.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

from h5sidecar.errors import InvalidReferenceError, StaleReferenceError
from h5sidecar.read import read_arrays
from h5sidecar.read._cube_view import source_key
from h5sidecar.read._shared_caches import range_cache_key
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import GranuleRefs, SourceInfo
from h5sidecar.settings import ReadSettings
from h5sidecar.workflows import build_cube, index_many, verify_refs

N = 50


def write_granule(path: Path, day: int, seed: int) -> Path:
    """One time step of ``v`` (uncompressed: another seed gives a file of the same size)."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        t = f.create_dataset("time", data=np.array([day], "f8"), maxshape=(None,), chunks=(1,))
        t.make_scale("time")
        t.attrs["units"] = "days since 2020-01-01"
        v = f.create_dataset("v", data=rng.integers(0, 1000, (1, N)).astype("i4"), chunks=(1, N))
        v.dims[0].attach_scale(t)
    return path


def h5(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f["v"][...]


def replace_keeping_size_and_mtime(src: Path) -> np.ndarray:
    """``os.replace`` ``src`` by another file of the same size, then ``os.utime`` it back to the
    old mtime; the new values (h5py)."""
    before = src.stat()
    tmp = src.with_name("new.tmp")
    write_granule(tmp, 0, seed=99)
    os.replace(tmp, src)
    os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = src.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    return h5(src)


def rewrite_in_place_keeping_mtime(src: Path) -> np.ndarray:
    """Rewrite ``src``'s bytes in place (same inode: a restore that overwrites), mtime set back."""
    before = src.stat()
    other = src.with_name("other.tmp")
    write_granule(other, 0, seed=99)
    with open(src, "r+b") as fh:
        fh.write(other.read_bytes())
    other.unlink()
    os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = src.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns)  # fmt: skip
    return h5(src)


CHANGES: dict[str, Callable[[Path], np.ndarray]] = {
    "replaced": replace_keeping_size_and_mtime,
    "rewritten_in_place": rewrite_in_place_keeping_mtime,
}


def index_two(tmp_path: Path, fmt: str) -> tuple[Path, str, str]:
    """(the first of two granules, its sidecar, a cube of both)."""
    folder = tmp_path / "in"
    folder.mkdir()
    src = write_granule(folder / "g0.h5", 0, seed=0)
    write_granule(folder / "g1.h5", 1, seed=1)
    ext = "json" if fmt == "json" else "parq"
    report = index_many(str(folder), str(tmp_path / "out"), format=fmt,  # type: ignore[arg-type]
                        executor="serial")  # fmt: skip
    assert report.ok, report.to_dict()
    cube = str(tmp_path / f"cube.{ext}")
    build_cube(str(tmp_path / "out"), cube, format=fmt)  # type: ignore[arg-type]
    return src, str(tmp_path / "out" / f"g0.h5.{ext}"), cube


@pytest.fixture(params=["json", "parquet"])
def indexed(tmp_path: Path, request: Any) -> tuple[Path, str, str]:
    return index_two(tmp_path, request.param)


def _fs_values(sidecar: str) -> np.ndarray:
    mapper = fsspec.filesystem("h5sidecar", fo=sidecar).get_mapper("")
    return zarr.open_group(mapper, mode="r", zarr_format=2)["v"][...]  # type: ignore[index]


READERS: dict[str, Callable[[str, str], np.ndarray]] = {
    "read_arrays": lambda side, cube: read_arrays(side, ["v"])["v"],
    "engine": lambda side, cube: xr.open_dataset(side, engine="h5sidecar")["v"].values,
    "cube": lambda side, cube: read_arrays(cube, ["v"])["v"][:1],
    "cube_engine": lambda side, cube: xr.open_dataset(cube, engine="h5sidecar")["v"].values[:1],
    "fs": lambda side, cube: _fs_values(side),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_reader_refuses_a_same_size_same_mtime_replacement(
    indexed: tuple[Path, str, str], change: str
) -> None:
    src, sidecar, cube = indexed
    old = h5(src)
    for name, read in READERS.items():
        np.testing.assert_array_equal(read(sidecar, cube), old, err_msg=name)
    new = CHANGES[change](src)
    assert not np.array_equal(new, old)
    for name, read in READERS.items():  # the same verdict from each: never the old chunks
        with pytest.raises(StaleReferenceError, match="re-index"):
            got = read(sidecar, cube)
            pytest.fail(f"{name} returned {'old' if np.array_equal(got, old) else 'other'} values")


def test_an_open_store_refuses_once_another_reader_saw_the_change(
    indexed: tuple[Path, str, str],
) -> None:
    """Within its revalidation window a store serves cached chunks without asking; once another
    reader of the process saw the source change, it refuses them too."""
    src, sidecar, _ = indexed
    store = SidecarStore(sidecar, settings=ReadSettings(revalidate_seconds=3600.0))
    np.testing.assert_array_equal(read_arrays(store, ["v"])["v"], h5(src))
    replace_keeping_size_and_mtime(src)
    with pytest.raises(StaleReferenceError):
        _fs_values(sidecar)
    with pytest.raises(StaleReferenceError, match="inode"):
        read_arrays(store, ["v"])


def test_index_and_verify_see_the_replacement(indexed: tuple[Path, str, str]) -> None:
    src, sidecar, _ = indexed
    out = str(Path(sidecar).parent)
    fmt = "json" if sidecar.endswith(".json") else "parquet"
    new = replace_keeping_size_and_mtime(src)
    assert verify_refs(sidecar, sample=0).source_changed
    again = index_many(str(src.parent), out, format=fmt, executor="serial")
    status = {Path(g.url).name: g.status for g in again.granules}
    assert status == {"g0.h5": "ok", "g1.h5": "up_to_date"}, again.to_dict()
    np.testing.assert_array_equal(read_arrays(sidecar, ["v"])["v"], new)
    np.testing.assert_array_equal(_fs_values(sidecar), new)


def test_sidecars_without_the_file_fields_still_read(tmp_path: Path) -> None:
    src, sidecar, _ = index_two(tmp_path, "json")  # (Parquet keeps the same extras block)
    doc = json.loads(Path(sidecar).read_text())
    source = doc["h5sidecar"]["source"]
    assert source["inode"] == src.stat().st_ino and source["ctime_ns"] == src.stat().st_ctime_ns
    for name in ("inode", "ctime_ns", "device"):
        del source[name]
    Path(sidecar).write_text(json.dumps(doc))
    np.testing.assert_array_equal(read_arrays(sidecar, ["v"])["v"], h5(src))


def test_a_recorded_size_of_minus_one_is_refused(tmp_path: Path) -> None:
    _, sidecar, _ = index_two(tmp_path, "json")
    doc = json.loads(Path(sidecar).read_text())
    doc["h5sidecar"]["source"]["size"] = -1  # would turn the freshness guard off
    Path(sidecar).write_text(json.dumps(doc))
    with pytest.raises(InvalidReferenceError, match="size -1"):
        read_arrays(sidecar, ["v"])


def test_same_object_compares_inode_and_ctime_when_both_sides_have_them() -> None:
    a = SourceInfo("f", 10, mtime_ns=5, inode=7, ctime_ns=9, device=1)
    assert a.same_object(SourceInfo("f", 10, mtime_ns=5, inode=7, ctime_ns=9, device=2))
    assert not a.same_object(SourceInfo("f", 10, mtime_ns=5, inode=8, ctime_ns=9))
    assert not a.same_object(SourceInfo("f", 10, mtime_ns=5, inode=7, ctime_ns=10))
    assert a.same_object(SourceInfo("f", 10, mtime_ns=5))  # an older sidecar: size and mtime
    back = SourceInfo.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back == a
    # the keys of chunk caches and of the gateway's ETags tell the two files apart
    b = SourceInfo("f", 10, mtime_ns=5, inode=8, ctime_ns=9, device=1)
    assert source_key(GranuleRefs(a, {"": {}}, {})) != source_key(GranuleRefs(b, {"": {}}, {}))
    assert range_cache_key("f", 0, 4, a) != range_cache_key("f", 0, 4, b)
