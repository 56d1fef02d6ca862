"""build_cube(mode="append"): only new granules are added, changed members replaced, nothing
re-read; every value read from the appended cube equals xarray + h5netcdf on the files."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import pytest
import xarray as xr

from h5sidecar.cli import main
from h5sidecar.errors import IncompatibleGranulesError, InvalidRequestError, StaleReferenceError
from h5sidecar.references import MANIFESTS_FILE, read_refs
from h5sidecar.sample import write_daily_collection, write_daily_granule
from h5sidecar.sample._collection import REPACKED
from h5sidecar.settings import RecordSettings
from h5sidecar.workflows import build_cube, index_many
from h5sidecar.workflows.cube._cube_assemble import read_record
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py, _assert_same, _reference

START = dt.date(2020, 1, 1)


def _index(src: Path, dest: Path) -> Path:
    report = index_many(str(src), str(dest), executor="serial")
    assert all(g.status in ("ok", "up_to_date") for g in report.granules), report.granules
    return dest


def _days(root: Path, first: int, n: int, **kw) -> list[Path]:
    return write_daily_collection(root, days=n, start=START + dt.timedelta(days=first), **kw)


def _read_everywhere(path: str, files: list[Path]) -> None:
    """engine="h5sidecar" (eager and Dask) and plain xarray on the references equal h5netcdf."""
    ref = _reference(files)
    for chunks in (None, {}):
        with xr.open_dataset(path, engine="h5sidecar", chunks=chunks) as ds:
            assert ds.sizes["time"] == len(files)
            _assert_same(ds, ref)
    so = {"fo": path, "remote_protocol": "file"}
    with xr.open_dataset("reference://", engine="zarr",
                         backend_kwargs={"consolidated": False, "storage_options": so}) as ds:
        _assert_same(ds, _reference(files, widened=True))


def _scramble_keeping_stamp(sidecar: Path) -> None:
    """Overwrite every file of a sidecar with junk of the same size and mtime: a stat sees
    the same sidecar, any read of it would fail."""
    files = [p for p in sidecar.rglob("*") if p.is_file()] if sidecar.is_dir() else [sidecar]
    for f in files:
        st = f.stat()
        f.write_bytes(b"\0" * st.st_size)
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_append_reads_only_the_new_granules(tmp_path: Path, fmt: str) -> None:
    old = _days(tmp_path / "nc", 0, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    out = str(tmp_path / f"cube.{'parq' if fmt == 'parquet' else 'json'}")
    first = build_cube(str(sidecars), out, format=fmt, mode="append")  # nothing yet: builds
    assert first.action == "built" and first.cubes[0].length == 3
    # the old members' sidecars become unreadable (same size and mtime) and their sources go
    # away: the append must read neither
    for f in old:
        _scramble_keeping_stamp(sidecars / f"{f.name}.parq")
    shutil.move(tmp_path / "nc", tmp_path / "away")
    new = _days(tmp_path / "nc2", 3, 2)
    _index(tmp_path / "nc2", sidecars)
    result = build_cube(str(sidecars), out, format=fmt, mode="append")
    assert result.action == "appended" and result.added == tuple(str(f) for f in new)
    assert result.sidecars_read == 2 and result.unchanged == 3 and result.replaced == ()
    assert result.written == ("tail" if fmt == "parquet" else "rewritten")
    assert result.cubes[0].length == 5 and result.cubes[0].path == out
    shutil.move(tmp_path / "away", tmp_path / "nc")
    files = old + new
    refs = read_refs(out)
    assert [m.url for m in refs.members] == [str(f) for f in files]
    assert read_record(refs.extra, out, refs.members)["lengths"] == [1] * 5
    _read_everywhere(out, files)
    _assert_raw_matches_h5py(out, files)

    # idempotent: nothing new, nothing written
    stamp = [(p, p.stat().st_mtime_ns) for p in Path(out).rglob("*")] if fmt == "parquet" \
        else [(Path(out), Path(out).stat().st_mtime_ns)]
    again = build_cube(str(sidecars), out, format=fmt, mode="append")
    assert again.action == "up_to_date" and again.added == again.replaced == ()
    assert again.sidecars_read == 0 and again.unchanged == 5
    assert [(p, p.stat().st_mtime_ns) for p, _ in stamp] == stamp


def test_changed_member_is_replaced_never_served_stale(tmp_path: Path) -> None:
    files = _days(tmp_path / "nc", 0, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    out = build_cube(str(sidecars), str(tmp_path / "cube.parq")).path
    write_daily_granule(files[1], START + dt.timedelta(days=1), seed=99)  # re-processed
    with xr.open_dataset(out, engine="h5sidecar", chunks=None) as ds, \
            pytest.raises(StaleReferenceError):
        ds["tas"].load()
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), out, mode="append")
    assert result.action == "appended" and result.replaced == (str(files[1]),)
    # the same length: replaced in place (its chunks' rows superseded, see test_cube_in_place)
    assert (result.written, result.why_rewritten) == ("tail", "")
    assert result.added == () and result.sidecars_read == 1
    refs = read_refs(out)
    assert refs.members[1] == read_refs(sidecars / "tas_20200102.nc.parq").source
    _read_everywhere(out, files)
    _assert_raw_matches_h5py(out, files)


def test_out_of_order_append_is_refused_or_rebuilt(tmp_path: Path) -> None:
    _days(tmp_path / "nc", 1, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    out = str(tmp_path / "cube.parq")
    build_cube(str(sidecars), out)
    before = (Path(out) / ".zmetadata").read_bytes()
    early = _days(tmp_path / "nc", 0, 1)[0]  # the day before the cube's first
    _index(tmp_path / "nc", sidecars)
    with pytest.raises(IncompatibleGranulesError, match=r"tas_20200101.nc starts at time 0.5.*"
                       r"not after the end"):
        build_cube(str(sidecars), out, mode="append")
    assert (Path(out) / ".zmetadata").read_bytes() == before
    # rebuilding needs every member: the new sidecar alone is not enough
    with pytest.raises(InvalidRequestError, match="rebuilding needs every member's sidecar"):
        build_cube([str(sidecars / f"{early.name}.parq")], out, mode="append",
                   on_out_of_order="rebuild")
    result = build_cube(str(sidecars), out, mode="append", on_out_of_order="rebuild")
    assert result.action == "rebuilt" and result.cubes[0].length == 4
    _read_everywhere(out, sorted((tmp_path / "nc").glob("*.nc")))


def test_append_of_another_encoding_is_refused_or_split(tmp_path: Path) -> None:
    regular = _days(tmp_path / "nc", 0, 2)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    out = str(tmp_path / "cube.parq")
    build_cube(str(sidecars), out)
    odd = write_daily_granule(tmp_path / "nc" / "tas_20200103_repacked.nc",
                              START + dt.timedelta(days=2), packing=REPACKED)
    _index(tmp_path / "nc", sidecars)
    with pytest.raises(IncompatibleGranulesError) as info:
        build_cube(str(sidecars), out, mode="append")
    text = str(info.value)
    assert "tas.scale_factor differs" in text and "tas_20200103_repacked.nc" in text
    assert "0.0099999" in text and "0.019999" in text
    split = build_cube(str(sidecars), out, mode="append", on_mismatch="split")
    assert [c.path for c in split.cubes] == [out, str(tmp_path / "cube-1.parq")]
    assert split.added == (str(odd),)
    with xr.open_dataset(split.cubes[1].path, engine="h5sidecar", chunks=None) as ds:
        _assert_same(ds, _reference([odd]))  # decoded with its own packing
    # a later regular day joins the first cube, the odd one's cube is untouched
    later = _days(tmp_path / "nc", 3, 1)
    _index(tmp_path / "nc", sidecars)
    again = build_cube(str(sidecars), out, mode="append", on_mismatch="split")
    assert again.added == (str(later[0]),) and again.cubes[1].length == 1
    _read_everywhere(out, [*regular, *later])


def test_cli_append(tmp_path: Path, capsys) -> None:
    _days(tmp_path / "nc", 0, 2)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    out = tmp_path / "cube.json"
    assert main(["cube", str(sidecars), "-o", str(out), "--format", "json", "--append"]) == 0
    capsys.readouterr()
    assert main(["cube", str(sidecars), "-o", str(out), "--format", "json", "--append"]) == 0
    assert "nothing new" in capsys.readouterr().out
    files = _days(tmp_path / "nc", 0, 3)
    _index(tmp_path / "nc", sidecars)
    assert main(["cube", str(sidecars), "-o", str(out), "--format", "json", "--append"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "1 granule(s) added" in said and "rewritten whole: a JSON cube is one document" in said
    _read_everywhere(str(out), files)


def test_append_on_s3(tmp_path: Path, s3, s3_bucket: str, s3_storage_options) -> None:
    files = _days(tmp_path / "nc", 0, 3, nlat=4, nlon=6)
    dest, out = f"s3://{s3_bucket}/sidecars", f"s3://{s3_bucket}/cube.parq"

    def upload_and_index(fs: list[Path]) -> None:
        for f in fs:
            s3.put(str(f), f"{s3_bucket}/nc/{f.name}")
        report = index_many(f"s3://{s3_bucket}/nc", dest, storage_options=s3_storage_options,
                            executor="serial")
        assert all(g.status in ("ok", "up_to_date") for g in report.granules)

    upload_and_index(files[:2])
    cache = tmp_path / "cache"  # DEST's record (its failed granules) read through this cache
    build_cube(dest, out, storage_options=s3_storage_options,
               record_settings=RecordSettings(str(cache)))
    assert len(list(cache.glob("*.sqlite"))) == 1
    upload_and_index(files[2:])
    result = build_cube(dest, out, storage_options=s3_storage_options, mode="append")
    assert result.action == "appended" and result.sidecars_read == 1 and result.unchanged == 2
    assert result.added == (f"s3://{s3_bucket}/nc/{files[2].name}",)
    assert result.written == "tail"  # on the object store too: only the new files written
    assert build_cube(dest, out, storage_options=s3_storage_options,
                      mode="append").action == "up_to_date"
    with xr.open_dataset(out, engine="h5sidecar", chunks=None, storage_options=s3_storage_options,
                         remote_options=s3_storage_options) as ds:
        _assert_same(ds, _reference(files))
    # a member re-processed: replaced in place in the cube on the object store
    write_daily_granule(files[1], START + dt.timedelta(days=1), seed=7, nlat=4, nlon=6)
    upload_and_index([files[1]])
    result = build_cube(dest, out, storage_options=s3_storage_options, mode="append")
    assert result.replaced == (f"s3://{s3_bucket}/nc/{files[1].name}",) and result.added == ()
    assert result.written == "tail"
    with xr.open_dataset(out, engine="h5sidecar", chunks=None, storage_options=s3_storage_options,
                         remote_options=s3_storage_options) as ds:
        _assert_same(ds, _reference(files))
    ref = {"fo": out, "target_options": s3_storage_options, "remote_protocol": "s3",
           "remote_options": {**s3_storage_options, "asynchronous": True}}
    with xr.open_dataset("reference://", engine="zarr", backend_kwargs={
            "consolidated": False, "storage_options": ref}) as ds:  # the record files
        _assert_same(ds, _reference(files, widened=True))
    whole = f"s3://{s3_bucket}/whole.parq"
    build_cube(dest, whole, storage_options=s3_storage_options)
    opts = {"storage_options": s3_storage_options}
    assert read_refs(out, lazy=False, **opts) == read_refs(whole, lazy=False, **opts)
    listed = {p.rpartition("cube.parq/")[2] for p in s3.find(f"{s3_bucket}/cube.parq")}
    # the files a build writes (the appends' small manifests parts merged into the first):
    # nothing stale left behind
    assert listed == {p.rpartition("whole.parq/")[2] for p in s3.find(f"{s3_bucket}/whole.parq")}


# zarr flags the numcodecs codecs of HDF5 filters as outside the Zarr v3 spec (they are ours)
@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3 specification")
def test_icechunk_append_is_a_commit_of_the_new_references(tmp_path: Path) -> None:
    pytest.importorskip("icechunk")
    from h5sidecar.workflows import open_icechunk

    files = _days(tmp_path / "nc", 0, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    repo_path = str(tmp_path / "cube.icechunk")
    build_cube(str(sidecars), repo_path, format="icechunk")
    built = open_icechunk(repo_path).lookup_branch("main")
    files += _days(tmp_path / "nc", 3, 2)
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), repo_path, format="icechunk", mode="append")
    assert result.action == "appended" and len(result.added) == 2 and result.sidecars_read == 2
    repo = open_icechunk(repo_path)
    history = [s.message for s in repo.ancestry(branch="main")]
    assert history[0].startswith("h5sidecar cube: append 2 granule(s)") and len(history) == 3

    def read(snapshot: str | None = None) -> xr.Dataset:
        session = repo.readonly_session(snapshot_id=snapshot) if snapshot else \
            repo.readonly_session("main")
        return xr.open_zarr(session.store, consolidated=False)

    with read() as ds:
        _assert_same(ds, _reference(files, widened=True))
    with read(built) as ds:  # time travel: the cube as built
        _assert_same(ds, _reference(files[:3], widened=True))
    # idempotent: no commit
    assert build_cube(str(sidecars), repo_path, format="icechunk",
                      mode="append").action == "up_to_date"
    assert len(list(open_icechunk(repo_path).ancestry(branch="main"))) == 3
    # a re-processed member is replaced in place by a commit; its new values are read
    write_daily_granule(files[1], START + dt.timedelta(days=1), seed=99)
    _index(tmp_path / "nc", sidecars)
    result = build_cube(str(sidecars), repo_path, format="icechunk", mode="append")
    assert result.replaced == (str(files[1]),) and result.added == ()
    repo = open_icechunk(repo_path)
    with read() as ds:
        _assert_same(ds, _reference(files, widened=True))
    # out of order: refused, nothing committed
    early = tmp_path / "early"
    early.mkdir()
    write_daily_granule(early / "tas_20191231.nc", START - dt.timedelta(days=1))
    _index(early, sidecars)
    tip = repo.lookup_branch("main")
    with pytest.raises(IncompatibleGranulesError, match=r"tas_20191231\.nc starts at time -0\.5"):
        build_cube(str(sidecars), repo_path, format="icechunk", mode="append")
    assert open_icechunk(repo_path).lookup_branch("main") == tip


def test_changed_member_outside_its_place_is_refused(tmp_path: Path) -> None:
    files = _days(tmp_path / "nc", 0, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    out = build_cube(str(sidecars), str(tmp_path / "cube.parq")).path
    before = (Path(out) / ".zmetadata").read_bytes()
    write_daily_granule(files[1], START + dt.timedelta(days=4))  # now holds a later day
    _index(tmp_path / "nc", sidecars)
    with pytest.raises(IncompatibleGranulesError,
                       match=r"tas_20200102.nc changed and now spans time 4.5..4.5, outside its "
                             r"place .* \(between 0.5 and 2.5\)"):
        build_cube(str(sidecars), out, mode="append")
    assert (Path(out) / ".zmetadata").read_bytes() == before


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def test_append_loads_only_the_new_sidecars_and_equals_a_build(tmp_path: Path,
                                                               monkeypatch) -> None:
    """An append loads the new granules' sidecars only (the members' are recognised by their
    stamps) and writes the cube a build of every sidecar writes, byte for byte but for the
    manifests file (a tail append writes the new rows after the old ones: the same manifests,
    rows in another order) and its size in ``.zmetadata``."""
    from h5sidecar.read import _sidecar_open as _cache

    _days(tmp_path / "nc", 0, 3)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    out = tmp_path / "appended.parq"
    build_cube(str(sidecars), str(out))
    new = _days(tmp_path / "nc", 3, 2)
    _index(tmp_path / "nc", sidecars)
    loaded: list[str] = []
    load = _cache.load_refs
    monkeypatch.setattr(_cache, "load_refs",
                        lambda path, *a, **k: loaded.append(str(path)) or load(path, *a, **k))
    result = build_cube(str(sidecars), str(out), mode="append")
    monkeypatch.undo()
    assert result.action == "appended" and result.unchanged == 3
    assert sorted(loaded) == sorted(str(sidecars / f"{f.name}.parq") for f in new)
    whole = build_cube(str(sidecars), str(tmp_path / "whole.parq"))
    assert whole.cubes[0].granules == result.cubes[0].granules
    assert result.written == "tail"
    got, want = _tree(out), _tree(tmp_path / "whole.parq")
    bulk = {p: t.pop(MANIFESTS_FILE) for p, t in (("got", got), ("want", want))}
    zmeta = {p: json.loads(t.pop(".zmetadata")) for p, t in (("got", got), ("want", want))}
    assert got == want  # every record file and the members file
    for z in zmeta.values():
        z["h5sidecar"]["manifests"].pop("bytes")
    assert zmeta["got"] == zmeta["want"]
    refs = {p: read_refs(str(tmp_path / p), lazy=False) for p in ("appended.parq", "whole.parq")}
    assert refs["appended.parq"] == refs["whole.parq"]
    assert bulk["got"] != bulk["want"]  # (the rows' order: say so if this ever changes)
    _read_everywhere(str(out), sorted((tmp_path / "nc").glob("*.nc")))
