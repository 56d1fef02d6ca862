"""A member of a local Parquet cube replaced by a granule of the same length is written in
place: its chunks keep their numbers, so the append writes their rows as a manifests part that
supersedes the old ones (``"over": true``), the record files and members files holding them
again, and nothing else of the cube's.  Every value then read (engine="h5sidecar" eager and
Dask, plain zarr over ``reference://``, the raw read path) equals xarray + h5netcdf and h5py
on the files, and the cube's references equal a build of every sidecar."""

from __future__ import annotations

import json
from pathlib import Path

import netCDF4
import numpy as np
import pyarrow as pa
import pytest
import xarray as xr

from h5sidecar.errors import IncompatibleGranulesError, InvalidReferenceError
from h5sidecar.references import MemberTable, SourceInfo, read_refs, write_parquet
from h5sidecar.references._extras import parse_extras
from h5sidecar.references._extras_versions import OVER_VERSION, PACKED_VERSION, unpack
from h5sidecar.references.parquet_sidecar._manifests_file import join_parts
from h5sidecar.references.parquet_sidecar._manifests_parts import bulk_parts
from h5sidecar.workflows import build_cube
from h5sidecar.workflows.cube._cube_columns import COLUMNS
from h5sidecar.workflows.cube._cube_parts import Part
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py, _assert_same, _reference
from tests.workflows.cube.test_cube_append import _index
from tests.workflows.cube.test_cube_tail_append import _stamps

STEPS = 2  # time steps a granule
FILL = -32767


def _granule(path: Path, first: int, *, seed: int = 0, steps: int = STEPS,
             hole: bool = False, chunks: tuple[int, int, int] = (1, 4, 6)) -> Path:
    """A granule of ``steps`` days from day ``first``: tas (packed, fill cells) and pr in
    chunks of (1, 4, 6) on an 8 x 12 grid, so each time step is 4 chunks and a granule 4 x
    ``steps``.  ``hole``: one chunk of tas never written (missing from the references);
    ``chunks``: tas's chunks (another encoding)."""
    rng = np.random.default_rng([seed, first])
    path.parent.mkdir(parents=True, exist_ok=True)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", 8)
        nc.createDimension("lon", 12)
        t = nc.createVariable("time", "f8", ("time",), chunksizes=(1,))
        t.setncatts({"units": "days since 2020-01-01", "calendar": "standard",
                     "standard_name": "time", "axis": "T"})
        t[:] = first + np.arange(steps) + 0.5
        for name, n in (("lat", 8), ("lon", 12)):
            v = nc.createVariable(name, "f4", (name,))
            v.units = "degrees_north" if name == "lat" else "degrees_east"
            v[:] = np.linspace(-60, 60, n)
        tas = nc.createVariable("tas", "i2", ("time", "lat", "lon"), zlib=True, shuffle=True,
                                chunksizes=chunks, fill_value=FILL)
        tas.setncatts({"units": "K", "scale_factor": np.float32(0.01),
                       "add_offset": np.float32(273.15)})
        tas.set_auto_maskandscale(False)
        packed = rng.integers(-2000, 2000, size=(steps, 8, 12)).astype("i2")
        packed[:, 0, 0] = FILL
        if hole:  # every chunk but the last of the first step: that one is never written
            tas[0, :4, :] = packed[0, :4, :]
            tas[0, 4:, :6] = packed[0, 4:, :6]
            tas[1:] = packed[1:]
        else:
            tas[:] = packed
        pr = nc.createVariable("pr", "f4", ("time", "lat", "lon"), zlib=True,
                               chunksizes=(1, 4, 6), fill_value=np.float32(-9999))
        pr.units = "mm day-1"
        pr[:] = rng.gamma(0.6, 4.0, size=(steps, 8, 12)).astype("f4")
    return path


def _collection(root: Path, n: int) -> list[Path]:
    return [_granule(root / f"g_{k:03d}.nc", STEPS * k) for k in range(n)]


def _read_everywhere(path: str, files: list[Path], steps: list[int] | None = None) -> None:
    """engine="h5sidecar" (eager and Dask) and plain xarray over ``reference://`` (the record
    files) equal xarray + h5netcdf on the files."""
    ref = _reference(files)
    for chunks in (None, {}):
        with xr.open_dataset(path, engine="h5sidecar", chunks=chunks) as ds:
            assert ds.sizes["time"] == (sum(steps) if steps else STEPS * len(files))
            _assert_same(ds, ref)
    so = {"fo": path, "remote_protocol": "file"}
    with xr.open_dataset("reference://", engine="zarr",
                         backend_kwargs={"consolidated": False, "storage_options": so}) as ds:
        _assert_same(ds, _reference(files, widened=True))


def _cube(tmp_path: Path, n: int, record_size: int) -> tuple[list[Path], Path, Path]:
    files = _collection(tmp_path / "nc", n)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    write_parquet(read_refs(str(cube), lazy=False), cube, record_size=record_size)
    return files, sidecars, cube


def _block(cube: Path) -> dict:
    return json.loads((cube / ".zmetadata").read_text())["h5sidecar"]


def _as_built(tmp_path: Path, sidecars: Path, cube: Path, record_size: int,
              changed: set[str]) -> None:
    """``cube`` holds the references a build of every sidecar writes, and its rewritten
    record files are that build's, byte for byte."""
    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    write_parquet(read_refs(str(whole), lazy=False), whole, record_size=record_size)
    assert read_refs(str(cube), lazy=False) == read_refs(str(whole), lazy=False)
    for rel in changed:
        if "/refs." in rel:
            assert (cube / rel).read_bytes() == (whole / rel).read_bytes(), rel


@pytest.mark.parametrize("record_size", [3, 8, 100_000])
def test_replaced_members_are_written_in_place_as_a_build_writes(
    tmp_path: Path, record_size: int
) -> None:
    """Members 1 and 3 of 5 re-processed (8 chunks each: with records of 3, their chunks span
    record files, and share them with their neighbours'): only the record files holding their
    chunks, the coordinate's, the members file, a new manifests part and .zmetadata change."""
    files, sidecars, cube = _cube(tmp_path, 5, record_size)
    before = _stamps(cube)
    for k in (1, 3):
        _granule(files[k], STEPS * k, seed=7)
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert sorted(result.replaced) == [str(files[1]), str(files[3])] and result.added == ()
    assert (result.written, result.why_rewritten) == ("tail", "")
    after = _stamps(cube)
    changed = {rel for rel, s in after.items() if before.get(rel) != s}
    per_member = 4 * STEPS  # chunks of tas (and of pr) a member
    records = {c // record_size for k in (1, 3)
               for c in range(k * per_member, (k + 1) * per_member)}
    assert changed == {".zmetadata", ".h5sidecar/members.parq", ".h5sidecar/manifests.1.parq",
                       "time/refs.0.parq",
                       *(f"{a}/refs.{r}.parq" for a in ("tas", "pr") for r in records)}
    assert set(after) - changed >= {"lat/refs.0.parq", ".h5sidecar/manifests.parq"}
    block = _block(cube)
    assert block["version"] == OVER_VERSION
    assert [p.get("over", False) for p in block["manifests"]["parts"]] == [False, True]
    _read_everywhere(str(cube), files)  # engine="h5sidecar" and plain zarr over reference://
    _assert_raw_matches_h5py(str(cube), files)
    _as_built(tmp_path, sidecars, cube, record_size, changed)


def test_a_member_replaced_twice_then_appended_to_reads_its_last_granule(
    tmp_path: Path,
) -> None:
    """A member replaced, then again (the second part supersedes the first's rows; the two
    parts are merged), then new granules after it (all parts merged into the first: nothing
    left to supersede, version 2 again): the last granule's values are read."""
    files, sidecars, cube = _cube(tmp_path, 8, 3)  # 131 rows: the replacements' not merged in
    for seed in (11, 12):
        _granule(files[2], STEPS * 2, seed=seed)
        _index(tmp_path / "nc", sidecars)
        assert build_cube(str(sidecars), str(cube), mode="append").written == "tail"
        _read_everywhere(str(cube), files)
    parts = _block(cube)["manifests"]["parts"]
    # the two replacements' parts merged: the second's 16 chunks and coordinate supersede
    # the first's (17 rows, not 34)
    assert [p["rows"] for p in parts] == [131, 17]
    assert parts[1]["over"] is True and _block(cube)["version"] == OVER_VERSION
    new = [_granule(tmp_path / "nc" / f"g_{k:03d}.nc", STEPS * k) for k in (8, 9)]
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.written == "tail" and result.replaced == () and len(result.added) == 2
    parts = _block(cube)["manifests"]["parts"]
    assert [(p["rows"], p.get("over")) for p in parts] == [(131, None), (17 + 32, True)]
    files += new
    _read_everywhere(str(cube), files)
    _assert_raw_matches_h5py(str(cube), files)
    _as_built(tmp_path, sidecars, cube, 3, set())


@pytest.mark.parametrize(("k", "change", "why"), [
    (2, {"steps": 3}, r"g_002.nc now spans 3 steps, not 2"),  # (the last: it still fits)
    (1, {"hole": True}, r"g_001.nc lacks chunks of tas"),
])
def test_a_replacement_that_cannot_be_in_place_rewrites_the_cube_and_says_why(
    tmp_path: Path, k: int, change: dict, why: str
) -> None:
    """A granule of another length (other chunk numbers after it), or one missing a chunk
    (no row to supersede the old one's), rewrites the cube whole; it reads right."""
    files, sidecars, cube = _cube(tmp_path, 3, 3)
    _granule(files[k], STEPS * k, seed=5, **change)
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.written == "rewritten" and result.replaced == (str(files[k]),)
    assert why in result.why_rewritten and result.why_rewritten.startswith(
        "members were replaced (")
    assert _block(cube)["version"] == PACKED_VERSION  # a whole write supersedes nothing
    _read_everywhere(str(cube), files, steps=[STEPS, STEPS, change.get("steps", STEPS)])
    _assert_raw_matches_h5py(str(cube), files)


def test_a_member_re_encoded_is_refused_and_the_cube_kept(tmp_path: Path) -> None:
    """A replacing granule chunked otherwise is another encoding: refused (rebuild the cube),
    the cube left as it was."""
    files, sidecars, cube = _cube(tmp_path, 3, 3)
    before = _stamps(cube)
    _granule(files[1], STEPS, seed=5, chunks=(1, 8, 6))
    _index(tmp_path / "nc", sidecars)
    with pytest.raises(IncompatibleGranulesError, match=r"(?s)tas.chunks differs: \[1, 4, 6\] in the "
                       r"cube .*g_001.nc is a member of .*and was re-encoded; rebuild the cube"):
        build_cube(str(sidecars), str(cube), mode="append")
    assert _stamps(cube) == before


def _rows(array: str, chunks: list[int], offset: int) -> pa.Table:
    n = len(chunks)
    return pa.table({
        "array": pa.array([array] * n).dictionary_encode(), "chunk": pa.array(chunks),
        "url": pa.array(["s3://b/g.nc"] * n).dictionary_encode(),
        "offset": pa.array([offset + c for c in chunks]), "size": pa.array([10] * n),
        "raw": pa.nulls(n, pa.binary())})


def test_a_part_marked_over_supersedes_the_earlier_rows_of_its_chunks_only() -> None:
    first = pa.concat_tables([_rows("tas", [0, 1, 2, 3], 0), _rows("pr", [0, 1, 2, 3], 0)])
    second = _rows("tas", [1, 3], 100)  # tas's chunks 1 and 3 again
    third = _rows("tas", [3], 200)
    joined = join_parts([first, second, third], [(), (), ()], [False, True, True])
    got = sorted(zip(joined.column("array").cast(pa.string()).to_pylist(),
                     joined.column("chunk").to_pylist(), joined.column("offset").to_pylist(),
                     strict=True))
    assert got == [("pr", c, c) for c in range(4)] + [
        ("tas", 0, 0), ("tas", 1, 101), ("tas", 2, 2), ("tas", 3, 203)]
    # not marked: the rows are joined as they are (every part's)
    assert join_parts([first, second], [(), ()]).num_rows == 10


def test_an_over_mark_is_checked_and_an_unknown_version_refused() -> None:
    part = {"file": ".h5sidecar/manifests.parq", "bytes": 10, "rows": 1, "whole": []}
    later = {"file": ".h5sidecar/manifests.1.parq", "bytes": 10, "rows": 1, "whole": []}
    parts = bulk_parts({"parts": [part, {**later, "over": True}]})
    assert parts is not None and [p.over for p in parts] == [False, True]
    for bad in ({"parts": [{**part, "over": True}]},  # the first part has nothing before it
                {"parts": [part, {**later, "over": "yes"}]}):
        with pytest.raises(InvalidReferenceError, match="malformed manifests parts"):
            bulk_parts(bad)
    with pytest.raises(InvalidReferenceError, match=r"version 4 is not supported \(this "
                       r"h5sidecar reads versions 1 to 3\); upgrade h5sidecar"):
        parse_extras({"version": 4, "source": {}})


def test_the_cube_replaced_in_place_unpacks_as_version_2_did(tmp_path: Path) -> None:
    """Version 3 is version 2's packed block (the over parts aside): it unpacks alike."""
    files, sidecars, cube = _cube(tmp_path, 3, 3)
    _granule(files[0], 0, seed=3)
    _index(tmp_path / "nc", sidecars)
    build_cube(str(sidecars), str(cube), mode="append")
    block = _block(cube)
    assert block["version"] == OVER_VERSION
    assert unpack(block)["version"] == 1 and len(read_refs(str(cube)).members) == 3
    _read_everywhere(str(cube), files)


def test_members_lengths_that_do_not_add_up_to_the_coordinate_are_refused() -> None:
    """The members' lengths place a replaced member's steps: a cube whose lengths and
    coordinate disagree is refused as damaged, not written at the wrong steps."""
    members = MemberTable.of([SourceInfo(url=f"/d/g{k}.nc", size=1) for k in range(3)])
    part = Part(path="cube.parq", record={"per_member": COLUMNS}, coord_attrs={},
                members=members.with_columns({"length": pa.array([2, 2, 2], pa.int64())}),
                coordinate=np.arange(6.0), shared={})
    assert part.starts.tolist() == [0, 2, 4, 6]
    short = Part(path="cube.parq", record={"per_member": COLUMNS}, coord_attrs={},
                 members=part.members, coordinate=np.arange(5.0), shared={})
    with pytest.raises(InvalidReferenceError, match=r"cube.parq: its members' lengths add up "
                       r"to 6 steps, its coordinate holds 5; the cube was damaged"):
        _ = short.starts


@pytest.mark.parametrize("folder", ["2020", "2021"])
def test_a_middle_member_of_another_length_rewrites_the_cube_as_a_build(
    tmp_path: Path, folder: str
) -> None:
    """Member 1 of 4 re-processed one step shorter (every chunk after it renumbered), with a
    new granule in the members' folder or beside it (its sidecar outside the cube's sidecar
    root): the cube is rewritten whole, reads right, and holds the references, the members
    (sidecar paths below the root) and the record a build of every sidecar writes."""
    files = [_granule(tmp_path / "nc" / "2020" / f"g_{k:03d}.nc", STEPS * k) for k in range(4)]
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    write_parquet(read_refs(str(cube), lazy=False), cube, record_size=3)
    assert "members_file" in _block(cube)  # a cube of member columns (the Arrow path)
    _granule(files[1], STEPS, seed=9, steps=1)
    files.append(_granule(tmp_path / "nc" / folder / "g_004.nc", STEPS * 4))
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.written == "rewritten" and result.replaced == (str(files[1]),)
    assert result.added == (str(files[4]),)
    assert "g_001.nc now spans 1 steps, not 2" in result.why_rewritten
    _read_everywhere(str(cube), files, steps=[STEPS, 1, STEPS, STEPS, STEPS])
    _assert_raw_matches_h5py(str(cube), files)
    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    assert read_refs(str(cube), lazy=False) == read_refs(str(whole), lazy=False)
    for name in (".h5sidecar/members.parq",):
        assert (cube / name).read_bytes() == (whole / name).read_bytes()
    root = str(sidecars / "2020") + "/" if folder == "2020" else str(sidecars) + "/"
    assert read_refs(str(cube)).extra["cube"]["sidecars"]["root"] == root
