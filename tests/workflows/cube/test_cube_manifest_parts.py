"""An append to a large local Parquet cube writes its new manifests rows as a part of their
own (``manifests.N.parq``), keeping the old parts; the parts read, in every reader, as the
files do and as a whole build's one manifests file does; readers without parts (older
versions, plain kerchunk) read the record files, which hold every chunk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import MANIFESTS_FILE, read_refs
from h5sidecar.references._extras_versions import pack, unpack
from h5sidecar.references.parquet_sidecar import _manifests_pieces
from h5sidecar.references.parquet_sidecar._manifests_parts import merge_plan
from h5sidecar.workflows import build_cube
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py
from tests.workflows.cube.test_cube_append import _days, _index, _read_everywhere
from tests.workflows.cube.test_cube_append_memory import _built
from tests.workflows.cube.test_cube_tail_append import _stamps


def _manifests(cube: Path) -> dict:
    return unpack(json.loads((cube / ".zmetadata").read_text())["h5sidecar"])["manifests"]


def _set_manifests(cube: Path, entry: dict | None) -> None:
    doc = json.loads((cube / ".zmetadata").read_text())
    block = unpack(doc["h5sidecar"])
    if entry is None:
        del block["manifests"]
    else:
        block["manifests"] = entry
    doc["h5sidecar"] = pack(block)
    (cube / ".zmetadata").write_text(json.dumps(doc))


def _cube(tmp_path: Path, days: int) -> tuple[list[Path], Path, Path]:
    return _built(tmp_path, days)  # (DEST is the sidecars' folder)


def _same_as_a_build(tmp_path: Path, sidecars: Path, cube: Path) -> None:
    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    assert read_refs(str(cube), lazy=False) == read_refs(str(whole), lazy=False)
    for names in (["time"], ["tas", "time"]):
        alone, built = read_refs(str(cube), arrays=names), read_refs(str(whole), arrays=names)
        for n in names:
            assert alone.arrays[n].manifest == built.arrays[n].manifest, n


def test_a_day_appended_writes_a_part_and_keeps_the_manifests_file(tmp_path: Path) -> None:
    files, sidecars, cube = _cube(tmp_path, 12)
    before = _stamps(cube)
    new = _days(tmp_path / "nc", 12, 1)
    _index(tmp_path / "nc", sidecars)
    assert build_cube(str(sidecars), str(cube), mode="append").written == "tail"
    after = _stamps(cube)
    assert after[MANIFESTS_FILE] == before[MANIFESTS_FILE]  # kept: hard-linked, not rewritten
    parts = _manifests(cube)["parts"]
    assert [p["file"] for p in parts] == [MANIFESTS_FILE, ".h5sidecar/manifests.1.parq"]
    assert parts[1]["whole"] == ["time"]  # the coordinate, given whole, supersedes its rows
    assert parts[1]["rows"] < parts[0]["rows"] / 5
    assert all((cube / p["file"]).stat().st_size == p["bytes"] for p in parts)
    _read_everywhere(str(cube), files + new)
    _assert_raw_matches_h5py(str(cube), files + new)
    _same_as_a_build(tmp_path, sidecars, cube)


@pytest.mark.parametrize("piece_rows", [None, 4], ids=["one-row-group", "row-groups-of-4"])
def test_daily_appends_keep_few_parts_and_read_right(tmp_path: Path, monkeypatch,
                                                     piece_rows) -> None:
    if piece_rows is not None:  # a large cube's parts, written in pieces, on a small one
        monkeypatch.setattr(_manifests_pieces, "PIECE_ROWS", piece_rows)
    files, sidecars, cube = _cube(tmp_path, 12)
    counts = []
    for day in range(12, 20):
        files += _days(tmp_path / "nc", day, 1)
        _index(tmp_path / "nc", sidecars)
        assert build_cube(str(sidecars), str(cube), mode="append").written == "tail"
        entry = _manifests(cube)
        # (merged into the first part when the appended rows grow to half of its: plain)
        parts = entry.get("parts") or [{"file": entry["file"]}]
        counts.append(len(parts))
        # no file of a part dropped by a merge is left behind
        on_disk = sorted(p.name for p in (cube / ".h5sidecar").glob("manifests*.parq"))
        assert on_disk == sorted(Path(p["file"]).name for p in parts)
    assert max(counts) <= 4 and 1 in counts and 3 in counts, counts
    _read_everywhere(str(cube), files)
    _assert_raw_matches_h5py(str(cube), files)
    _same_as_a_build(tmp_path, sidecars, cube)


def test_a_reader_without_parts_reads_the_record_files_to_the_same_values(
    tmp_path: Path,
) -> None:
    """What an h5sidecar older than parts does (no manifests file it knows) and what plain
    kerchunk readers always do: the record files hold every chunk, appended ones too."""
    files, sidecars, cube = _cube(tmp_path, 12)
    files += _days(tmp_path / "nc", 12, 2)
    _index(tmp_path / "nc", sidecars)
    build_cube(str(sidecars), str(cube), mode="append")
    assert "parts" in _manifests(cube)
    with_parts = read_refs(str(cube), lazy=False)
    _set_manifests(cube, None)
    assert read_refs(str(cube), lazy=False) == with_parts
    _read_everywhere(str(cube), files)


@pytest.mark.parametrize("change", [
    pytest.param(lambda ps: ps[1].update(file="../../etc/x.parq"), id="a-path-outside"),
    pytest.param(lambda ps: ps[0].update(file=".h5sidecar/manifests.4.parq"), id="first-renamed"),
    pytest.param(lambda ps: ps.append(dict(ps[1])), id="a-file-twice"),
    pytest.param(lambda ps: ps[1].update(rows=-3), id="negative-rows"),
    pytest.param(lambda ps: ps[1].update(whole="time"), id="whole-not-a-list"),
    pytest.param(lambda ps: ps.clear(), id="no-part"),
])
def test_a_malformed_parts_entry_is_refused(tmp_path: Path, change) -> None:
    _, sidecars, cube = _cube(tmp_path, 12)
    _days(tmp_path / "nc", 12, 1)
    _index(tmp_path / "nc", sidecars)
    build_cube(str(sidecars), str(cube), mode="append")
    entry = _manifests(cube)
    change(entry["parts"])
    _set_manifests(cube, entry)
    with pytest.raises(InvalidReferenceError, match="malformed manifests parts"):
        read_refs(str(cube), lazy=False)


def test_a_part_missing_or_of_another_size_is_named(tmp_path: Path) -> None:
    _, sidecars, cube = _cube(tmp_path, 12)
    _days(tmp_path / "nc", 12, 1)
    _index(tmp_path / "nc", sidecars)
    build_cube(str(sidecars), str(cube), mode="append")
    part = cube / ".h5sidecar/manifests.1.parq"
    data = part.read_bytes()
    part.write_bytes(data + b"x")
    with pytest.raises(InvalidReferenceError, match=r"manifests\.1\.parq is \d+ bytes"):
        read_refs(str(cube), lazy=False)
    part.unlink()
    with pytest.raises(InvalidReferenceError, match=r"manifests\.1\.parq is missing"):
        read_refs(str(cube), lazy=False)


@pytest.mark.parametrize(("rows", "merged"), [
    ([100, 1], 1), ([1, 1], 2), ([100, 3, 1], 1), ([100, 2, 1], 2), ([100, 3, 2, 1], 3),
    ([5], 1), ([100, 60, 25, 10], 1), ([100, 60, 25, 20], 4), ([1000, 60, 25, 20], 3),
])
def test_merge_plan_merges_the_trailing_parts_of_like_size(rows, merged) -> None:
    assert merge_plan(rows) == merged


def test_a_part_giving_an_array_whole_drops_its_earlier_rows() -> None:
    import pyarrow as pa

    from h5sidecar.references.parquet_sidecar._manifests_file import join_parts

    def rows(arrays: list[str], chunks: list[int]) -> pa.Table:
        names = pa.array(arrays, pa.string()).dictionary_encode()
        n = len(arrays)
        return pa.table({"array": names, "chunk": pa.array(chunks, pa.int64()),
                         "url": pa.array(["u"] * n, pa.string()).dictionary_encode(),
                         "offset": pa.array(range(n), pa.int64()),
                         "size": pa.array([1] * n, pa.int64()),
                         "raw": pa.nulls(n, pa.binary())})

    first = rows(["tas", "tas", "time", "time", "lat"], [0, 1, 0, 1, 0])
    second = rows(["tas", "time"], [2, 0])
    third = rows(["tas"], [3])
    joined = join_parts([first, second, third], [[], ["time"], []])
    got = list(zip(pa.compute.cast(joined.column("array"), pa.string()).to_pylist(),
                   joined.column("chunk").to_pylist(), strict=True))
    assert got == [("tas", 0), ("tas", 1), ("lat", 0), ("tas", 2), ("time", 0), ("tas", 3)]
