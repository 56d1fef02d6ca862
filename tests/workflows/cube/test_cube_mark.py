"""An append asks DEST's record what was indexed since the cube was written (the cube keeps the
record's mark): it neither lists DEST nor stats the members' sidecars, and with nothing new it
reads neither the members nor the manifests.  Every value read from the appended cube equals
xarray + h5netcdf and h5py on the files."""

from __future__ import annotations

import datetime as dt
import shutil
import sqlite3
from pathlib import Path

import pytest

from h5sidecar.cli import main
from h5sidecar.dest import RECORD_NAME, open_record
from h5sidecar.references import read_refs
from h5sidecar.references.parquet_sidecar._members_file import _Loader
from h5sidecar.sample import write_daily_granule
from h5sidecar.workflows import build_cube
from h5sidecar.workflows.cube import _cube_classify, _cube_listing, _cube_mark
from h5sidecar.workflows.cube._cube_mark import MARK_KEY
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py
from tests.workflows.cube.test_cube_append import START, _days, _index, _read_everywhere


def _watch(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Count DEST listings, member-stamp comparisons and member-file reads."""
    seen: dict[str, list[int]] = {"listed": [], "stamped": [], "members": []}
    listing, stamps, load = (_cube_listing.list_sidecars, _cube_classify._same_stamps,
                             _Loader.__call__)
    monkeypatch.setattr(_cube_listing, "list_sidecars",
                        lambda *a, **k: seen["listed"].append(1) or listing(*a, **k))
    monkeypatch.setattr("h5sidecar.workflows.cube._cube_build.list_sidecars",
                        lambda *a, **k: seen["listed"].append(1) or listing(*a, **k))
    monkeypatch.setattr(_cube_classify, "_same_stamps",
                        lambda paths, rec: seen["stamped"].append(len(paths)) or stamps(paths, rec))
    monkeypatch.setattr(_Loader, "__call__", lambda self: seen["members"].append(1) or load(self))
    return seen


def _mark(cube: Path) -> dict:
    return dict(read_refs(str(cube)).extra["cube"][MARK_KEY])


def test_an_append_asks_the_record_not_the_folder(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    files = _days(tmp_path / "nc", 0, 3)
    dest = _index(tmp_path / "nc", tmp_path / "dest")
    cube = tmp_path / "cube.parq"
    built = build_cube(str(dest), str(cube))
    mark = _mark(cube)
    assert len(mark.pop("uid")) == 32  # the record's id
    assert mark == {"record": str((dest / RECORD_NAME).resolve()), "seq": 3,
                    "span": [built.cubes[0].first, built.cubes[0].last]}

    seen = _watch(monkeypatch)
    again = build_cube(str(dest), str(cube), mode="append")
    assert again.action == "up_to_date" and again.unchanged == 3 and again.sidecars_read == 0
    # nothing listed, stat-ed or read of the members: the cube's .zmetadata and one query
    assert seen == {"listed": [], "stamped": [], "members": []}
    part = again.cubes[0]
    assert (part.length, part.first, part.last) == (3, built.cubes[0].first,
                                                     built.cubes[0].last)
    assert list(part.granules) == [str(f) for f in files] and len(part.granules) == 3

    new = _days(tmp_path / "nc", 3, 2)
    _index(tmp_path / "nc", dest)
    result = build_cube(str(dest), str(cube), mode="append")
    assert result.action == "appended" and result.added == tuple(str(f) for f in new)
    assert result.written == "tail" and result.sidecars_read == 2 and result.unchanged == 3
    assert seen["listed"] == [] and seen["stamped"] == []  # the two rows alone were asked
    assert _mark(cube)["seq"] == 5 and _mark(cube)["span"] == [result.cubes[0].first,
                                                               result.cubes[0].last]
    monkeypatch.undo()
    _read_everywhere(str(cube), [*files, *new])
    _assert_raw_matches_h5py(str(cube), [*files, *new])
    # what the record-led append wrote is what a build of every sidecar writes
    whole = build_cube(str(dest), str(tmp_path / "whole.parq"))
    assert read_refs(str(cube), lazy=False) == read_refs(str(tmp_path / "whole.parq"), lazy=False)
    assert whole.cubes[0].granules == result.cubes[0].granules


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_a_reindexed_member_is_found_from_its_row(tmp_path: Path, fmt: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    files = _days(tmp_path / "nc", 0, 3)
    dest = _index(tmp_path / "nc", tmp_path / "dest")
    cube = tmp_path / f"cube.{'parq' if fmt == 'parquet' else 'json'}"
    build_cube(str(dest), str(cube), format=fmt)
    write_daily_granule(files[1], START + dt.timedelta(days=1), seed=7)  # re-processed
    _index(tmp_path / "nc", dest)
    seen = _watch(monkeypatch)
    result = build_cube(str(dest), str(cube), format=fmt, mode="append")
    assert result.replaced == (str(files[1]),) and result.sidecars_read == 1
    # the re-indexed member's sidecar alone was stat-ed (not every member's)
    assert seen["listed"] == [] and sum(seen["stamped"]) == 1
    assert _mark(cube)["seq"] == 4
    monkeypatch.undo()
    _read_everywhere(str(cube), files)
    _assert_raw_matches_h5py(str(cube), files)


def test_recheck_finds_a_sidecar_changed_behind_the_record(tmp_path: Path, capsys) -> None:
    """A sidecar replaced by hand (here: copied from another DEST) is no row of the record:
    the record-led append does not see it, ``--recheck`` does, by its stamp."""
    files = _days(tmp_path / "nc", 0, 3)
    dest = _index(tmp_path / "nc", tmp_path / "dest")
    cube = tmp_path / "cube.parq"
    build_cube(str(dest), str(cube))
    write_daily_granule(files[2], START + dt.timedelta(days=2), seed=11)
    other = _index(tmp_path / "nc", tmp_path / "other")
    name = f"{files[2].name}.parq"
    shutil.rmtree(dest / name)
    shutil.copytree(other / name, dest / name)
    assert main(["cube", str(dest), "-o", str(cube), "--append"]) == 0
    assert "nothing new" in capsys.readouterr().out
    assert main(["cube", str(dest), "-o", str(cube), "--append", "--recheck"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "1 replaced" in said, said
    _read_everywhere(str(cube), files)
    _assert_raw_matches_h5py(str(cube), files)


def test_a_cube_from_a_list_or_another_dest_lists_dest(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A cube whose record holds no mark of this DEST's record (built from a list of
    sidecars; or the DEST was moved) is appended to by listing DEST, as before."""
    files = _days(tmp_path / "nc", 0, 2)
    dest = _index(tmp_path / "nc", tmp_path / "dest")
    cube = tmp_path / "cube.parq"
    build_cube([str(dest / f"{f.name}.parq") for f in files], str(cube))
    assert MARK_KEY not in read_refs(str(cube)).extra["cube"]
    new = _days(tmp_path / "nc", 2, 1)
    _index(tmp_path / "nc", dest)
    seen = _watch(monkeypatch)
    result = build_cube(str(dest), str(cube), mode="append")
    assert result.added == (str(new[0]),) and seen["listed"] == [1]
    assert _mark(cube)["seq"] == 3  # marked now: the next append asks the record
    moved = tmp_path / "moved"
    shutil.copytree(dest, moved)
    seen["listed"].clear()
    assert build_cube(str(moved), str(cube), mode="append").action == "up_to_date"
    assert seen["listed"] == [1]  # another record: listed
    monkeypatch.undo()
    _read_everywhere(str(cube), [*files, *new])


def test_the_record_counter_only_grows_and_old_records_are_upgraded(tmp_path: Path) -> None:
    files = _days(tmp_path / "nc", 0, 2)
    dest = _index(tmp_path / "nc", tmp_path / "dest")
    record = open_record(str(dest), create=False)
    try:
        uid, seq = record.mark()
        assert seq == 2
        assert [s for _, s in record.changed_since(1)] == [str(dest / f"{files[1].name}.parq")]
        record.drop([str(dest / f"{files[1].name}.parq")])  # a pruned granule
        assert record.mark() == (uid, 2) and list(record.changed_since(1)) == []
    finally:
        record.close()
    _index(tmp_path / "nc", dest)  # re-indexed: numbered after everything before
    record = open_record(str(dest), create=False)
    try:
        assert record.mark() == (uid, 3)
        assert [s for _, s in record.changed_since(2)] == [str(dest / f"{files[1].name}.parq")]
    finally:
        record.close()
    # a version-2 record (no numbers) is upgraded on first open; its rows are numbered 0
    db = sqlite3.connect(dest / RECORD_NAME)
    db.execute("DROP INDEX granules_by_seq")
    db.execute("DROP TABLE seqs")
    db.execute("ALTER TABLE granules DROP COLUMN seq")
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()
    cube = tmp_path / "cube.parq"
    build_cube(str(dest), str(cube))
    assert _mark(cube)["seq"] == 0
    new = _days(tmp_path / "nc", 2, 1)
    _index(tmp_path / "nc", dest)
    result = build_cube(str(dest), str(cube), mode="append")
    assert result.added == (str(new[0]),) and result.sidecars_read == 1
    _read_everywhere(str(cube), [*files, *new])


def test_a_dest_indexed_anew_in_place_is_listed(tmp_path: Path) -> None:
    """DEST removed and indexed again at the same place is another record (another id), even
    when its counter has passed the cube's mark: the append lists it, missing nothing."""
    files = _days(tmp_path / "nc", 0, 3)
    dest = _index(tmp_path / "nc", tmp_path / "dest")
    cube = tmp_path / "cube.parq"
    build_cube(str(dest), str(cube))
    shutil.rmtree(dest)
    later = _days(tmp_path / "later", 3, 2)
    _index(tmp_path / "later", dest)  # rows 1-2: the new days
    _index(tmp_path / "nc", dest)  # rows 3-5: the cube's members, again
    result = build_cube(str(dest), str(cube), mode="append")
    assert result.action == "appended" and result.added == tuple(str(f) for f in later)
    _read_everywhere(str(cube), [*files, *later])


def test_before_is_a_key_that_many_seconds_earlier() -> None:
    key = f"part-{123 * 10**9 + 5:020d}-{'a' * 32}"
    assert _cube_mark._before(key, 3600) == "part-00000000000000000000"
    assert _cube_mark._before(key, 100) == f"part-{23 * 10**9 + 5:020d}"
    assert _cube_mark._before(key, 100) < f"part-{23 * 10**9 + 5:020d}-{'0' * 32}" < key
    assert _cube_mark._before("part-0-x", 10) == "part-0-x"  # another shape: itself


@pytest.mark.parametrize("margin", [0, None])
def test_an_append_from_an_object_store_dest_asks_its_record(
        tmp_path: Path, s3, s3_bucket: str, s3_storage_options, margin,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An object-store DEST's record (parts, through the record cache) marks the cube with its
    newest row key: an append asks it for the rows keyed after it (less the margin) instead of
    listing DEST and asking every member's sidecar stamp (a HEAD each)."""
    import h5py
    import numpy as np
    import xarray as xr

    from h5sidecar.read import read_arrays
    from h5sidecar.settings import RecordSettings
    from h5sidecar.workflows import index_many
    from tests.workflows.cube.test_cube import _assert_same, _reference

    so = s3_storage_options
    files = _days(tmp_path / "nc", 0, 4, nlat=4, nlon=6)
    dest = f"s3://{s3_bucket}/marked"
    settings = RecordSettings(str(tmp_path / "cache"))  # the default margin: an hour
    if margin is not None:
        settings = RecordSettings(str(tmp_path / "cache"), record_mark_margin_s=margin)

    def upload_and_index(fs: list[Path]) -> None:
        for f in fs:
            s3.put(str(f), f"{s3_bucket}/nc/{f.name}")
        report = index_many(f"s3://{s3_bucket}/nc", dest, storage_options=so,
                            executor="serial", record_settings=settings)
        assert all(g.status in ("ok", "up_to_date") for g in report.granules)

    def append():
        return build_cube(dest, str(cube), storage_options=so, mode="append",
                          record_settings=settings)

    upload_and_index(files[:3])
    cube = tmp_path / "cube.parq"
    build_cube(dest, str(cube), storage_options=so, record_settings=settings)
    mark = _mark(cube)
    assert mark["record"] == f"{dest}/_h5sidecar_record" and mark["uid"] is None
    assert mark["key"].startswith("part-") and "seq" not in mark
    seen = _watch(monkeypatch)
    heads: list[str] = []
    stamp = _cube_classify.sidecar_stamp
    monkeypatch.setattr(_cube_classify, "sidecar_stamp",
                        lambda p, o: heads.append(p) or stamp(p, o))
    r0 = append()
    assert r0.action == "up_to_date" and seen["listed"] == []
    if margin == 0:  # the cube's .zmetadata and the record alone
        assert seen == {"listed": [], "stamped": [], "members": []} and heads == []
    else:  # the rows written within the margin before the mark: their stamps asked again
        assert len(heads) == 3 and r0.sidecars_read == 0
    heads.clear()

    upload_and_index(files[3:])
    result = append()
    assert result.added == (f"s3://{s3_bucket}/nc/{files[3].name}",)
    assert result.sidecars_read == 1 and result.written == "tail" and seen["listed"] == []
    # no member's sidecar asked but those written within the margin before the mark
    assert len(heads) == (0 if margin == 0 else 3), heads
    heads.clear()
    assert _mark(cube)["key"] > mark["key"]

    write_daily_granule(files[1], START + dt.timedelta(days=1), seed=7, nlat=4, nlon=6)
    upload_and_index([files[1]])  # re-processed
    heads.clear()
    result = append()
    assert result.replaced == (f"s3://{s3_bucket}/nc/{files[1].name}",) and result.added == ()
    assert seen["listed"] == []
    monkeypatch.undo()
    with xr.open_dataset(str(cube), engine="h5sidecar", chunks=None, storage_options=so,
                         remote_options=so) as ds:
        _assert_same(ds, _reference(files))
    # plain xarray over the references (kerchunk's reader), and raw values against h5py
    ref = {"fo": str(cube), "remote_protocol": "s3",
           "remote_options": {**so, "asynchronous": True}}
    with xr.open_dataset("reference://", engine="zarr", backend_kwargs={
            "consolidated": False, "storage_options": ref}) as ds:
        _assert_same(ds, _reference(files, widened=True))
    raw = read_arrays(str(cube), ["tas", "time"], remote_options=so)
    for k, f in enumerate(files):
        with h5py.File(f) as h:
            np.testing.assert_array_equal(raw["tas"][k], h["tas"][0])
            np.testing.assert_array_equal(raw["time"][k], h["time"][0])
    whole = tmp_path / "whole.parq"
    build_cube(dest, str(whole), storage_options=so, record_settings=settings)
    assert read_refs(str(cube), lazy=False) == read_refs(str(whole), lazy=False)

    # a granule indexed, its sidecar then removed by hand: its row names a sidecar no longer
    # there, left out as a listing would leave it (nothing added, no error)
    extra = _days(tmp_path / "more", 4, 1, nlat=4, nlon=6)
    s3.put(str(extra[0]), f"{s3_bucket}/nc/{extra[0].name}")
    upload_and_index([])
    s3.rm(f"{s3_bucket}/marked/{extra[0].name}.parq", recursive=True)
    gone = append()
    assert gone.added == () and gone.replaced == () and gone.action == "up_to_date"
