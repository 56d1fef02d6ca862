"""A cube's member records are packed (extras version 2); cubes written before (version 1)
still read and take appends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xarray as xr

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.read import load_refs
from h5sidecar.references import read_refs
from h5sidecar.references._extras_versions import PACKED_FIELDS, unpack
from h5sidecar.workflows import build_cube
from h5sidecar.workflows.cube._cube_assemble import read_record
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py, _assert_same, _reference
from tests.workflows.cube.test_cube_append import _days, _index, _read_everywhere

DAYS = 12


def _block_file(cube: Path) -> Path:
    return cube / ".zmetadata" if cube.is_dir() else cube


def _block(cube: Path) -> dict:
    return json.loads(_block_file(cube).read_text())["h5sidecar"]


def _as_version_1(cube: Path) -> None:
    """Rewrite a cube's extras as h5sidecar wrote them before packing (version 1)."""
    if cube.is_dir():  # first as before the members file (packed, version 2)
        from tests.workflows.cube.test_cube_members_file import _as_packed

        _as_packed(cube)
    doc = json.loads(_block_file(cube).read_text())
    doc["h5sidecar"] = unpack(doc["h5sidecar"])
    _block_file(cube).write_text(json.dumps(doc))


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_members_are_packed_and_read_back(tmp_path: Path, fmt: str) -> None:
    files = _days(tmp_path / "nc", 0, DAYS)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / ("cube.parq" if fmt == "parquet" else "cube.json")
    build_cube(str(sidecars), str(cube), format=fmt)
    block = _block(cube)
    assert block["version"] == 2 and not set(PACKED_FIELDS) & set(block)
    plain = json.dumps({k: v for k, v in unpack(block).items() if k in PACKED_FIELDS})
    assert len(json.dumps(block["packed"])) < len(plain) / 2
    refs = read_refs(str(cube))
    want = {load_refs(str(sidecars / f"{f.name}.parq")).source for f in files}
    assert set(refs.members) == want and len(refs.members) == DAYS
    assert refs.extra["cube"]["granules"] == DAYS
    with xr.open_dataset(cube, engine="h5sidecar", chunks=None) as ds:
        _assert_same(ds, _reference(files))
    _assert_raw_matches_h5py(str(cube), files)


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_a_cube_of_version_1_reads_and_takes_appends(tmp_path: Path, fmt: str) -> None:
    old = _days(tmp_path / "nc", 0, 4)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / ("cube.parq" if fmt == "parquet" else "cube.json")
    build_cube(str(sidecars), str(cube), format=fmt)
    packed = read_refs(str(cube), lazy=False)  # (a Parquet cube's members file read now)
    _as_version_1(cube)
    assert _block(cube)["version"] == 1 and "members" in _block(cube)
    refs = read_refs(str(cube))
    assert refs.members == packed.members
    assert (read_record(refs.extra, str(cube), refs.members)
            == read_record(packed.extra, str(cube), packed.members))
    _read_everywhere(str(cube), old)
    new = _days(tmp_path / "nc", 4, 2)
    _index(tmp_path / "nc", sidecars)
    res = build_cube(str(sidecars), str(cube), format=fmt, mode="append")
    assert res.action == "appended" and len(res.added) == 2
    assert _block(cube)["version"] == 2  # rewritten in the new layout
    _read_everywhere(str(cube), old + new)


def test_damaged_packed_members_are_refused(tmp_path: Path) -> None:
    _days(tmp_path / "nc", 0, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.json"
    build_cube(str(sidecars), str(cube), format="json")
    doc = json.loads(cube.read_text())
    good = dict(doc["h5sidecar"]["packed"])
    for bad, match in (({**good, "data": good["data"][:-40]}, "unreadable"),
                       ({**good, "size": 2**40}, "size"),
                       ({**good, "codec": "gzip"}, "codec")):
        doc["h5sidecar"]["packed"] = bad
        cube.write_text(json.dumps(doc))
        with pytest.raises(InvalidReferenceError, match=match):
            read_refs(str(cube))
    # members both packed and plain: ambiguous, refused
    doc["h5sidecar"]["packed"] = good
    doc["h5sidecar"]["members"] = []
    cube.write_text(json.dumps(doc))
    with pytest.raises(InvalidReferenceError, match="both packed and not"):
        read_refs(str(cube))


def test_members_are_packed_a_slice_at_a_time(monkeypatch) -> None:
    """The packed JSON is written a slice of members at a time into one buffer, the same bytes
    as ``json.dumps`` of the whole: every member's dict and two copies of the text at once
    were ~1 GB at the write of a million-member cube (3.5 times the text here; now 2)."""
    import tracemalloc

    from h5sidecar.references import GranuleRefs, SourceInfo, _extras, _extras_versions

    n = 40_000
    members = tuple(SourceInfo(url=f"/data/collection/granule_{i:07d}.nc", size=52_000 + i,
                               mtime_ns=1_700_000_000_000_000_000 + i, inode=10_000 + i,
                               ctime_ns=1_700_000_000_000_000_000 + i, device=2049)
                    for i in range(n))
    refs = GranuleRefs(members[0], {}, {}, extra={"cube": {"lengths": [1] * n}},
                       members=members)
    monkeypatch.setattr(_extras_versions, "MEMBERS_SLICE", 1000, raising=False)
    tracemalloc.start()
    try:
        packed = _extras.build_extras(refs, checksums="file")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    inner = unpack(packed)
    assert inner["members"] == [m.to_dict() for m in members]
    whole = json.dumps({k: inner[k] for k in PACKED_FIELDS}, separators=(",", ":"))
    assert packed["packed"]["size"] == len(whole.encode())
    text = packed["packed"]["size"]
    assert peak < 2.5 * text, f"{peak / 2**20:.1f} MB traced for {text / 2**20:.1f} MB of JSON"
