"""A Parquet cube of many members holds them in several members files of a fixed number each
(``members.parq``, ``members.1.parq``, ...); an append rewrites only the last one and adds new
ones, and digests only those members.  Here a part is 2 members (``DIGEST_ROWS`` patched), so
a few daily granules make several parts."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.read._cube_view import source_key
from h5sidecar.references import MemberTable, read_refs
from h5sidecar.references._extras_versions import pack, unpack
from h5sidecar.references.datacube import _member_table
from h5sidecar.references.datacube._member_table import ranges
from h5sidecar.references.parquet_sidecar import _members_file
from h5sidecar.references.parquet_sidecar._members_file import MEMBERS_FILE, member_file
from h5sidecar.sample import write_daily_granule
from h5sidecar.workflows import build_cube
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py
from tests.workflows.cube.test_cube_append import START, _days, _index, _read_everywhere
from tests.workflows.cube.test_cube_append_memory import _built
from tests.workflows.cube.test_cube_tail_append import _stamps


@pytest.fixture
def parts_of_two(monkeypatch) -> None:
    monkeypatch.setattr(_member_table, "DIGEST_ROWS", 2)


def _entry(cube: Path) -> dict:
    return unpack(json.loads((cube / ".zmetadata").read_text())["h5sidecar"])["members_file"]


def _members_files(cube: Path) -> list[str]:
    return sorted(p.name for p in (cube / ".h5sidecar").glob("members*.parq"))


def test_a_cube_of_many_members_writes_them_in_parts_and_reads_them_whole(
    tmp_path: Path, parts_of_two
) -> None:
    files = _days(tmp_path / "nc", 0, 5)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    assert _members_files(cube) == ["members.1.parq", "members.2.parq", "members.parq"]
    entry = _entry(cube)
    assert [p["count"] for p in entry["parts"]] == [2, 2, 1] and entry["count"] == 5
    assert entry["bytes"] == sum((cube / member_file(k)).stat().st_size for k in range(3))
    refs = read_refs(str(cube))
    assert not refs.members.is_loaded
    assert [m.url for m in refs.members] == [str(f) for f in files]  # every part, in order
    # the digest a reader is given is the one the loaded members give
    loaded = MemberTable(refs.members.table)
    assert refs.members.digest() == loaded.digest() == entry["digest"]
    assert source_key(refs) == f"cube:{entry['digest']}"
    _read_everywhere(str(cube), files)
    _assert_raw_matches_h5py(str(cube), files)


def test_an_append_rewrites_the_last_members_file_only(tmp_path: Path, parts_of_two) -> None:
    old, sidecars, cube = _built(tmp_path, 3)
    before = _stamps(cube)
    digests = [p["digest"] for p in _entry(cube)["parts"]]
    new = _days(tmp_path / "nc", 3, 2)
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.written == "tail", result.why_rewritten
    after = _stamps(cube)
    # the full first file kept (hard-linked), the partial second rewritten, a third added
    assert after[MEMBERS_FILE] == before[MEMBERS_FILE]
    assert after[member_file(1)] != before[member_file(1)]
    assert member_file(2) in after and member_file(2) not in before
    entry = _entry(cube)
    assert [p["count"] for p in entry["parts"]] == [2, 2, 1]
    assert entry["parts"][0]["digest"] == digests[0]
    files = old + new
    _read_everywhere(str(cube), files)
    _assert_raw_matches_h5py(str(cube), files)
    # what a build of every member writes: the same members files and entry
    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    assert _entry(whole) == entry
    for k in range(3):
        assert (cube / member_file(k)).read_bytes() == (whole / member_file(k)).read_bytes()
    assert read_refs(str(cube), lazy=False) == read_refs(str(whole), lazy=False)


def test_an_append_to_a_full_last_file_adds_one(tmp_path: Path, parts_of_two) -> None:
    old, sidecars, cube = _built(tmp_path, 4)
    before = _stamps(cube)
    new = _days(tmp_path / "nc", 4, 1)
    _index(tmp_path / "nc", sidecars)
    assert build_cube(str(sidecars), str(cube), mode="append").written == "tail"
    after = _stamps(cube)
    assert after[MEMBERS_FILE] == before[MEMBERS_FILE]
    assert after[member_file(1)] == before[member_file(1)]
    assert [p["count"] for p in _entry(cube)["parts"]] == [2, 2, 1]
    _read_everywhere(str(cube), old + new)


def test_a_cube_written_in_one_members_file_is_appended_in_parts(
    tmp_path: Path, monkeypatch
) -> None:
    """A cube an earlier version wrote (every member in one file, more than a part now) takes
    a tail append: its members are then written in parts, as a build would."""
    old = _days(tmp_path / "nc", 0, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))  # parts of 100,000: one file
    assert "parts" not in _entry(cube)
    monkeypatch.setattr(_member_table, "DIGEST_ROWS", 2)
    new = _days(tmp_path / "nc", 3, 1)
    _index(tmp_path / "nc", sidecars)
    assert build_cube(str(sidecars), str(cube), mode="append").written == "tail"
    assert [p["count"] for p in _entry(cube)["parts"]] == [2, 2]
    _read_everywhere(str(cube), old + new)
    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    assert _entry(whole) == _entry(cube)


def _rewrite_entry(cube: Path, change) -> None:
    doc = json.loads((cube / ".zmetadata").read_text())
    block = unpack(doc["h5sidecar"])
    change(block["members_file"])
    doc["h5sidecar"] = pack(block)
    (cube / ".zmetadata").write_text(json.dumps(doc))


@pytest.mark.parametrize("change", [
    pytest.param(lambda e: e["parts"][0].update(count=3), id="counts-not-the-total"),
    pytest.param(lambda e: e["parts"].reverse(), id="a-partial-part-first"),
    pytest.param(lambda e: e["parts"][1].update(digest="0" * 32), id="digest-not-theirs"),
    pytest.param(lambda e: e["parts"][2].update(bytes=-1), id="negative-bytes"),
    pytest.param(lambda e: e.update(parts=e["parts"][:1]), id="one-part-listed"),
    pytest.param(lambda e: e.update(parts={"0": 1}), id="not-a-list"),
    pytest.param(lambda e: e["parts"][0]["ranges"].update(url=["z", "a"]), id="range-reversed"),
    pytest.param(lambda e: e["parts"][1].update(ranges=["a", "b"]), id="ranges-not-an-object"),
])
def test_a_malformed_parts_entry_is_refused_at_open(tmp_path: Path, parts_of_two,
                                                    change) -> None:
    _days(tmp_path / "nc", 0, 5)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    read_refs(str(cube))  # as written: opens
    _rewrite_entry(cube, change)
    with pytest.raises(InvalidReferenceError, match="malformed members_file entry"):
        read_refs(str(cube))


def test_a_missing_or_swapped_members_file_is_named_when_the_members_are_read(
    tmp_path: Path, parts_of_two
) -> None:
    _days(tmp_path / "nc", 0, 5)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))
    (cube / member_file(1)).rename(tmp_path / "kept.parq")
    refs = read_refs(str(cube))
    with pytest.raises(InvalidReferenceError, match=r"members\.1\.parq is missing"):
        len(refs.members.urls)
    # the first part's file in its place, its size listed: the URLs repeat
    first = (cube / MEMBERS_FILE).read_bytes()
    (cube / member_file(1)).write_bytes(first)

    def listed(entry: dict) -> None:
        entry["bytes"] += len(first) - entry["parts"][1]["bytes"]
        entry["parts"][1]["bytes"] = len(first)

    _rewrite_entry(cube, listed)
    # its values are not in the ranges recorded for the second file
    with pytest.raises(InvalidReferenceError, match=r"members\.1\.parq's values are not"):
        len(read_refs(str(cube)).members.urls)
    _rewrite_entry(cube, lambda e: e["parts"][1].update(ranges=e["parts"][0]["ranges"]))
    with pytest.raises(InvalidReferenceError, match="lists a member URL twice"):
        len(read_refs(str(cube)).members.urls)


def test_members_files_of_another_size_are_rewritten_whole_by_an_append(
    tmp_path: Path, monkeypatch
) -> None:
    """A cube whose members files hold another number each (written by a version with
    another part size) keeps every member when appended to: all its files are read."""
    old = _days(tmp_path / "nc", 0, 5)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    monkeypatch.setattr(_member_table, "DIGEST_ROWS", 2)
    build_cube(str(sidecars), str(cube))
    assert [p["count"] for p in _entry(cube)["parts"]] == [2, 2, 1]
    monkeypatch.setattr(_member_table, "DIGEST_ROWS", 3)
    new = _days(tmp_path / "nc", 5, 1)
    _index(tmp_path / "nc", sidecars)
    assert build_cube(str(sidecars), str(cube), mode="append").written == "tail"
    assert [p["count"] for p in _entry(cube)["parts"]] == [3, 3]
    assert _members_files(cube) == ["members.1.parq", "members.parq"]
    _read_everywhere(str(cube), old + new)
    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    assert _entry(whole) == _entry(cube)


def _as_a_build_writes(tmp_path: Path, sidecars: Path, cube: Path, files: int = 0) -> None:
    """``cube`` is what a build of every sidecar in ``sidecars`` writes: the same members
    entry and references, and the first ``files`` members files byte for byte."""
    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    assert _entry(whole) == _entry(cube)
    for k in range(files):
        assert (cube / member_file(k)).read_bytes() == (whole / member_file(k)).read_bytes()
    assert read_refs(str(cube), lazy=False) == read_refs(str(whole), lazy=False)


def _reads(monkeypatch) -> list[int]:
    """The members files read, as they are: ``k`` one file alone, -1 every file at once."""
    seen: list[int] = []
    loader = _members_file._Loader
    one, every = loader.read, loader.__call__

    def read(self, k: int):
        seen.append(k)
        return one(self, k)

    def call(self):
        seen.append(-1)
        return every(self)

    monkeypatch.setattr(loader, "read", read)
    monkeypatch.setattr(loader, "__call__", call)
    return seen


def test_an_append_reads_only_the_members_files_that_may_hold_what_it_looks_up(
    tmp_path: Path, parts_of_two, monkeypatch
) -> None:
    """A day's append looks up whether its granule is a member and whose sidecar changed:
    each file's recorded ranges rule out all files but the last (which it rewrites)."""
    old, sidecars, cube = _built(tmp_path, 5)
    assert [p["ranges"]["url"] for p in _entry(cube)["parts"]] == [
        [str(old[0]), str(old[1])], [str(old[2]), str(old[3])], [str(old[4])] * 2]
    new = _days(tmp_path / "nc", 5, 1)
    _index(tmp_path / "nc", sidecars)
    seen = _reads(monkeypatch)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.written == "tail" and result.added == (str(new[0]),)
    assert seen == [2]  # the last file only
    assert len(result.cubes[0].granules) == 6
    files = old + new
    _read_everywhere(str(cube), files)
    _assert_raw_matches_h5py(str(cube), files)
    _as_a_build_writes(tmp_path, sidecars, cube)


def test_a_member_in_an_early_file_is_found_and_replaced(tmp_path: Path, parts_of_two,
                                                         monkeypatch) -> None:
    """A re-processed member of the first file: its range holds the changed sidecar and the
    granule's URL, so that file is read and the member replaced (never added twice)."""
    files, sidecars, cube = _built(tmp_path, 5)
    write_daily_granule(files[1], START + dt.timedelta(days=1), seed=99)  # re-processed
    _index(tmp_path / "nc", sidecars)
    seen = _reads(monkeypatch)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.replaced == (str(files[1]),) and result.added == ()
    # its columns (the last file) and the lookup (the first), each once: replaced in place,
    # no other file is read whole (a rewrite of the whole cube read the second too)
    assert seen == [2, 0]
    refs = read_refs(str(cube))
    assert [m.url for m in refs.members] == [str(f) for f in files]
    _read_everywhere(str(cube), files)
    _assert_raw_matches_h5py(str(cube), files)
    # the replaced row swapped in its file: what a build writes
    _as_a_build_writes(tmp_path, sidecars, cube, files=3)


def test_members_files_written_before_their_ranges_get_them_at_the_first_append(
    tmp_path: Path, parts_of_two, monkeypatch
) -> None:
    old, sidecars, cube = _built(tmp_path, 5)
    _rewrite_entry(cube, lambda e: [p.pop("ranges") for p in e["parts"]])
    new = _days(tmp_path / "nc", 5, 1)
    _index(tmp_path / "nc", sidecars)
    seen = _reads(monkeypatch)
    assert build_cube(str(sidecars), str(cube), mode="append").written == "tail"
    assert 0 in seen and 1 in seen  # no range to rule a file out: each read
    entry = _entry(cube)
    for k, part in enumerate(entry["parts"]):  # each file's own
        assert part["ranges"] == ranges(pq.read_table(cube / member_file(k)))
    _read_everywhere(str(cube), old + new)
    whole = tmp_path / "whole.parq"
    build_cube(str(sidecars), str(whole))
    assert _entry(whole) == entry


def test_members_replaced_and_added_in_one_append_are_what_a_build_writes(
    tmp_path: Path, parts_of_two
) -> None:
    """Two members replaced (in two files) and a day added in one append: the cube, its
    replaced members written in place and the day as its tail, is the one a build of every
    sidecar writes."""
    old, sidecars, cube = _built(tmp_path, 5)
    for k in (1, 4):  # re-processed
        write_daily_granule(old[k], START + dt.timedelta(days=k), seed=50 + k)
    new = _days(tmp_path / "nc", 5, 1)
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert sorted(result.replaced) == [str(old[1]), str(old[4])]
    assert result.added == (str(new[0]),) and result.written == "tail"
    files = old + new
    _read_everywhere(str(cube), files)
    _assert_raw_matches_h5py(str(cube), files)
    assert _members_files(cube) == ["members.1.parq", "members.2.parq", "members.parq"]
    _as_a_build_writes(tmp_path, sidecars, cube, files=3)


def test_a_member_replaced_in_place_reads_no_members_file_whole(
    tmp_path: Path, parts_of_two, monkeypatch
) -> None:
    """Replacing member 3 of 5 (members files of 2) reads the file holding it and the last
    (the columns' types) and each file's length column alone, never every file whole; the
    file holding it is written again, the others kept."""
    old, sidecars, cube = _built(tmp_path, 5)
    write_daily_granule(old[3], START + dt.timedelta(days=3), seed=77)
    _index(tmp_path / "nc", sidecars)
    before = _stamps(cube)
    seen = _reads(monkeypatch)
    result = build_cube(str(sidecars), str(cube), mode="append")
    assert (result.written, result.replaced) == ("tail", (str(old[3]),))
    assert -1 not in seen and set(seen) == {1, 2}, seen
    changed = {rel for rel, s in _stamps(cube).items() if before.get(rel) != s}
    assert {rel for rel in changed if "members" in rel} == {".h5sidecar/members.1.parq"}
    _read_everywhere(str(cube), old)
    _assert_raw_matches_h5py(str(cube), old)
    _as_a_build_writes(tmp_path, sidecars, cube, files=3)
