"""A Parquet cube's members (and its per-member record) live in ``.h5sidecar/members.parq``,
read when first needed: opening a cube parses nothing per member; cubes written before, with
their members packed in ``.zmetadata``, still read and take appends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xarray as xr

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.read._cube_view import cube_summary, is_cube, source_key
from h5sidecar.references import GranuleRefs, read_refs
from h5sidecar.references._extras import build_extras
from h5sidecar.references._extras_versions import unpack
from h5sidecar.references.parquet_sidecar._members_file import MEMBERS_FILE, _Loader
from h5sidecar.workflows import build_cube
from h5sidecar.workflows.cube._cube_assemble import read_record
from h5sidecar.workflows.cube._cube_columns import with_lists
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py, _assert_same, _reference
from tests.workflows.cube.test_cube_append import _days, _index, _read_everywhere


def _zmeta(cube: Path) -> dict:
    return json.loads((cube / ".zmetadata").read_text())


def _count_loads(monkeypatch) -> list[int]:
    calls: list[int] = []
    load = _Loader.__call__
    monkeypatch.setattr(_Loader, "__call__", lambda self: calls.append(1) or load(self))
    return calls


def test_open_reads_no_member_and_metadata_does_not_grow(tmp_path: Path, monkeypatch) -> None:
    files = _days(tmp_path / "nc", 0, 12)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    build_cube([str(sidecars / f"{f.name}.parq") for f in files[:2]], str(tmp_path / "c2.parq"))
    cube = tmp_path / "cube.parq"
    # both from lists (a DEST's cube also keeps its record's mark: see _cube_mark)
    build_cube([str(sidecars / f"{f.name}.parq") for f in files], str(cube))
    # nothing per member in .zmetadata: 10 more members, the same size but for the shapes
    sizes = [len((tmp_path / n / ".zmetadata").read_bytes()) for n in ("c2.parq", "cube.parq")]
    assert abs(sizes[1] - sizes[0]) < 40, sizes
    block = unpack(_zmeta(cube)["h5sidecar"])
    assert "members" not in block and block["members_file"]["count"] == 12
    assert {a["urls"] for p, a in block["arrays"].items() if p in ("tas", "pr")} == {"members"}
    assert "lengths" not in block["extra"]["cube"]
    loads = _count_loads(monkeypatch)
    refs = read_refs(str(cube))
    assert len(refs.members) == 12 and is_cube(refs)
    assert cube_summary(refs)["members"] == 12 and source_key(refs).startswith("cube:")
    assert loads == []  # opened without reading the members
    with xr.open_dataset(cube, engine="h5sidecar", chunks={}) as ds:
        _assert_same(ds.load(), _reference(files))
    assert loads == [1]  # read once (the store's allow-list and freshness guard)
    _assert_raw_matches_h5py(str(cube), files)
    _read_everywhere(str(cube), files)  # and plain xarray over fsspec reference://
    record = read_record(refs.extra, str(cube), refs.members)
    assert record["lengths"] == [1] * 12
    assert record["sidecars"] == {f"{f}": [str(sidecars / f"{f.name}.parq"), record[
        "sidecars"][str(f)][1]] for f in files}


def _as_packed(cube: Path) -> None:
    """Rewrite a Parquet cube as h5sidecar wrote it before its members file: members, URL
    indices and the per-member record packed in ``.zmetadata`` (extras version 2)."""
    refs = read_refs(str(cube), lazy=False)
    record = with_lists(refs.extra["cube"], refs.members, str(cube))
    old = GranuleRefs(refs.source, refs.groups, refs.arrays, refs.skipped,
                      {**refs.extra, "cube": record}, tuple(refs.members))
    doc = _zmeta(cube)
    manifests = doc["h5sidecar"]["manifests"]
    doc["h5sidecar"] = {**build_extras(old, checksums="file"), "manifests": manifests}
    (cube / ".zmetadata").write_text(json.dumps(doc, default=lambda a: a.tolist()))
    (cube / MEMBERS_FILE).unlink()


def test_a_cube_with_packed_members_reads_and_takes_appends(tmp_path: Path) -> None:
    old = _days(tmp_path / "nc", 0, 4)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    before = read_refs(str(cube), lazy=False)  # (its members read now)
    _as_packed(cube)
    assert "members_file" not in _zmeta(cube)["h5sidecar"]
    refs = read_refs(str(cube))
    assert list(refs.members) == list(before.members) and refs.extra["cube"]["lengths"] == [1] * 4
    _read_everywhere(str(cube), old)
    new = _days(tmp_path / "nc", 4, 2)
    _index(tmp_path / "nc", sidecars)
    res = build_cube(str(sidecars), str(cube), mode="append")
    assert res.action == "appended" and len(res.added) == 2 and res.sidecars_read == 2
    assert (cube / MEMBERS_FILE).exists()  # rewritten in the new layout
    assert _zmeta(cube)["h5sidecar"]["members_file"]["count"] == 6
    _read_everywhere(str(cube), old + new)
    _assert_raw_matches_h5py(str(cube), old + new)


@pytest.mark.parametrize("damage", ["truncate", "remove"])
def test_a_damaged_members_file_is_refused_when_needed(tmp_path: Path, damage: str) -> None:
    _days(tmp_path / "nc", 0, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    path = cube / MEMBERS_FILE
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:-10])
    else:
        path.unlink()
    refs = read_refs(str(cube))  # opens: the members are not needed yet
    assert len(refs.members) == 3
    with pytest.raises(InvalidReferenceError, match=r"members\.parq"):
        list(refs.members)
    with pytest.raises(InvalidReferenceError, match=r"members\.parq"):
        xr.open_dataset(cube, engine="h5sidecar", chunks=None)["tas"].values  # noqa: B018


def test_a_build_copies_neither_its_members_nor_their_urls(tmp_path: Path, monkeypatch) -> None:
    """A build's members stay in its pieces' columns (joined, they were held twice at the
    write) and their URLs are one sequence: the cube's granules and the result's ``added``
    are it, not copies; the cube reads as the granules do."""
    from h5sidecar.references import MemberTable
    from h5sidecar.workflows.cube import _cube_batches

    files = _days(tmp_path / "nc", 0, 6)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    monkeypatch.setattr(_cube_batches, "BATCH", 2)
    concat, joined = MemberTable.concat, []
    monkeypatch.setattr(MemberTable, "concat",
                        staticmethod(lambda parts: joined.append(concat(parts)) or joined[-1]))
    result = build_cube(str(sidecars), str(tmp_path / "cube.parq"))
    assert result.added is result.cubes[0].granules
    assert result.added == tuple(f.as_posix() for f in files)
    assert joined[-1].table.column("url").num_chunks == 3  # a piece of 2 granules a chunk
    with xr.open_dataset(tmp_path / "cube.parq", engine="h5sidecar", chunks=None) as ds:
        _assert_same(ds, _reference(files))
    _assert_raw_matches_h5py(str(tmp_path / "cube.parq"), files)


def test_a_parquet_build_holds_its_members_urls_once_in_arrow(tmp_path: Path,
                                                              monkeypatch) -> None:
    """The cube's arrays share one URL table, which is the members' URL column itself (a
    tuple of a Python string a member was ~110 bytes each at the write, and the writers made
    it into Arrow again); the cube written is the one a tuple of the same URLs gives."""
    import shutil
    from dataclasses import replace

    from h5sidecar.references import ChunkManifest, UrlColumn, write_refs
    from h5sidecar.workflows.cube import _cube_batches, _cube_build

    files = _days(tmp_path / "nc", 0, 6)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    monkeypatch.setattr(_cube_batches, "BATCH", 2)
    written: list[GranuleRefs] = []
    write = _cube_build.write_cube
    monkeypatch.setattr(_cube_build, "write_cube",
                        lambda cube, *a: written.append(cube) or write(cube, *a))
    result = build_cube(str(sidecars), str(tmp_path / "cube.parq"))
    (cube,) = written
    urls = {id(cube.arrays[p].manifest.urls) for p in ("tas", "pr")}
    assert len(urls) == 1 and cube.arrays["tas"].manifest.urls is result.added
    assert isinstance(result.added, UrlColumn) and result.added == tuple(map(str, files))
    members = cube.members.urls  # type: ignore[union-attr]
    assert members.num_chunks == 1  # one copy of the URLs, the members' and the arrays'
    assert members.chunk(0).buffers()[2].address == result.added.arrow.buffers()[2].address
    # the same bytes as the cube's references with a tuple of str
    arrays = {p: a if not isinstance(a.manifest.urls, UrlColumn) else replace(
        a, manifest=ChunkManifest.from_checked(
            urls=tuple(a.manifest.urls), codes=a.manifest.codes, offsets=a.manifest.offsets,
            lengths=a.manifest.lengths, inline=a.manifest.inline))
        for p, a in cube.arrays.items()}
    as_tuple = GranuleRefs(cube.source, cube.groups, arrays, cube.skipped, cube.extra,
                           cube.members)
    write_refs(as_tuple, str(tmp_path / "tuple.parq"), format="parquet")
    got, want = tmp_path / "cube.parq", tmp_path / "tuple.parq"
    names = sorted(p.relative_to(want) for p in want.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(got) for p in got.rglob("*") if p.is_file())
    for rel in names:
        assert (got / rel).read_bytes() == (want / rel).read_bytes(), rel
    shutil.rmtree(want)
    with xr.open_dataset(got, engine="h5sidecar", chunks=None) as ds:
        _assert_same(ds, _reference(files))
    _assert_raw_matches_h5py(str(got), files)


def test_the_members_file_of_chunked_members_is_that_of_the_joined_ones(monkeypatch) -> None:
    """The members file is written a row group at a time, each joined first: the bytes a
    whole joined table gives (written from the chunks, its pages, over a MB a column here,
    followed them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from h5sidecar.references import MemberTable, SourceInfo
    from h5sidecar.references.parquet_sidecar import _members_file

    monkeypatch.setattr(_members_file, "_ROW_GROUP", 30_000)
    members = MemberTable.of(SourceInfo(url=f"/data/collection/granule_{i:07d}.nc",
                                        size=52_000 + 7 * i, mtime_ns=1_700_000_000 + i,
                                        inode=10_000 + i)
                             for i in range(70_000))
    whole = members.table
    chunked = pa.concat_tables([whole.slice(i, 2000) for i in range(0, whole.num_rows, 2000)])
    files, entry = _members_file.encode_members(MemberTable(chunked))
    assert (files, entry) == _members_file.encode_members(members)
    [(name, data)] = files  # 70,000 members: one file
    assert name == _members_file.MEMBERS_FILE and "parts" not in entry
    assert pq.ParquetFile(pa.BufferReader(data)).metadata.num_row_groups == 3
