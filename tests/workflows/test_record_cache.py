"""The local cache of an object-store DEST's record (moto S3, reads counted in s3fs): a run
touching one of N recorded granules reads only the parts written since the last reader, a
compaction's rows are not read again, and a DEST emptied or edited by hand is loaded anew."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from h5sidecar.dest import RecordView, _record_cache, _record_store
from h5sidecar.workflows import index_many, read_report, write_report
from tests.workflows.conftest import assert_matches_h5py, write_granule
from tests.workflows.test_record_parts import _history, _synthetic

PARTS = "_h5sidecar_record"


def _parts(s3: Any, bucket: str) -> set[str]:
    s3.invalidate_cache()
    return {p.rsplit("/", 1)[-1] for p in s3.ls(f"{bucket}/out/{PARTS}")
            if p.endswith(".parquet")}


class _Reads:
    """The objects this process GETs from S3 (s3fs sends every read through ``_call_s3``; the
    recording proxy of the other tests cannot carry uploads, which these runs make)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import s3fs

        self.keys: list[str] = []
        real = s3fs.S3FileSystem._call_s3

        async def spy(fs: Any, method: str, *args: Any, **kwargs: Any) -> Any:
            if method == "get_object":
                self.keys.append(str(kwargs.get("Key")))
            return await real(fs, method, *args, **kwargs)

        monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", spy)

    def clear(self) -> None:
        self.keys.clear()

    def parts(self) -> set[str]:
        """The parts whose bytes were read (a footer or rows)."""
        return {k.rsplit("/", 1)[-1] for k in self.keys if f"{PARTS}/part-" in k}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> _Reads:
    return _Reads(monkeypatch)


def test_a_run_touching_one_granule_reads_only_the_parts_written_since(
        tmp_path: Path, s3, s3_bucket: str, s3_storage_options, reads: _Reads) -> None:
    options = s3_storage_options
    dest, source = f"s3://{s3_bucket}/out", f"s3://{s3_bucket}/in"
    write_report(_synthetic(3000, s3_bucket), dest, storage_options=options)
    big = _parts(s3, s3_bucket)
    local = {}
    for i in range(2):
        local[f"G{i}.h5"] = write_granule(tmp_path / f"G{i}.h5", seed=i, n=1500)
        s3.put(str(local[f"G{i}.h5"]), f"{s3_bucket}/in/G{i}.h5")
    assert index_many(source, dest, storage_options=options, executor="serial").ok
    before = _parts(s3, s3_bucket)
    write_granule(tmp_path / "new.h5", seed=9, n=1700)
    s3.put(str(tmp_path / "new.h5"), f"{s3_bucket}/in/G1.h5")
    reads.clear()
    again = index_many(source, dest, storage_options=options, executor="serial")
    assert {g.name: g.status for g in again.granules} == {"G0.h5": "up_to_date", "G1.h5": "ok"}
    # the 3000 recorded granules' part is not read again: only the previous run's parts
    assert reads.parts() and reads.parts() <= before - big
    reads.clear()
    noop = index_many(source, dest, storage_options=options, executor="serial")
    assert noop.counts["up_to_date"] == 2
    assert reads.parts() and reads.parts() <= _parts(s3, s3_bucket) - before
    report = read_report(dest, storage_options=options)
    assert report.n_granules == 3002 and report.carried_over == 3000
    assert next(g for g in report.granules if g.name == "G1.h5").n_chunks > 0
    assert_matches_h5py(f"{dest}/G1.h5.parq", tmp_path / "new.h5", s3_storage_options,
                        remote_protocol="s3")
    assert_matches_h5py(f"{dest}/G0.h5.parq", local["G0.h5"], s3_storage_options,
                        remote_protocol="s3")


def test_a_compaction_of_parts_already_loaded_reads_none_of_them(
        s3, s3_bucket: str, s3_storage_options, reads: _Reads) -> None:
    options = s3_storage_options
    dest = f"s3://{s3_bucket}/out"
    base = _synthetic(50, s3_bucket)
    write_report(base, dest, storage_options=options)
    for i in range(3):
        write_report(replace(base, granules=(replace(base.granules[i], status="failed"),)),
                     dest, storage_options=options)
    before = read_report(dest, storage_options=options)  # every part loaded into the cache
    fs, root = _record_store.store_of(dest, options)
    reads.clear()
    compacted = _record_store.compact(fs, root, threshold=1)
    assert compacted is not None and len(_parts(s3, s3_bucket)) == 1
    assert reads.parts() == set()  # compacted from the cache: no part read again
    reads.clear()
    with _record_store.Mirror(fs, root) as mirror:
        assert mirror.read == 0  # its footer only (its ``covers``), not its rows
    assert reads.parts() == {compacted.rsplit("/", 1)[-1]}
    assert read_report(dest, storage_options=options) == before
    assert [g.status for g in before.granules[:4]] == ["failed"] * 3 + ["ok"]


def test_a_part_removed_by_hand_is_not_answered_from_the_cache(
        s3, s3_bucket: str, s3_storage_options) -> None:
    dest = f"s3://{s3_bucket}/out"
    base = _synthetic(4, s3_bucket)
    write_report(replace(base, granules=base.granules[:2]), dest,
                 storage_options=s3_storage_options)
    late = write_report(replace(base, granules=base.granules[2:]), dest,
                        storage_options=s3_storage_options)
    assert read_report(dest, storage_options=s3_storage_options).n_granules == 4
    s3.rm(late.split("://", 1)[1])  # not a compaction: the cache starts again
    report = read_report(dest, storage_options=s3_storage_options)
    assert [g.name for g in report.granules] == [g.name for g in base.granules[:2]]


def test_overlapping_runs_keep_the_newest_run_as_the_latest(
        s3, s3_bucket: str, s3_storage_options) -> None:
    from h5sidecar.dest._parts_writer import PartsWriter, header_of

    dest = f"s3://{s3_bucket}/out"
    fs, root = _record_store.store_of(dest, s3_storage_options)
    base = _synthetic(3, s3_bucket)
    slow, fast = PartsWriter(fs, root), PartsWriter(fs, root)
    slow.add(base.granules[0])
    slow.flush(header_of(replace(base, source="s3://x/slow", granules=()), slow.uid, ""))
    assert read_report(dest, storage_options=s3_storage_options).source == "s3://x/slow"
    fast.add(base.granules[1])
    fast.flush(header_of(replace(base, source="s3://x/fast", granules=()), fast.uid, ""))
    assert read_report(dest, storage_options=s3_storage_options).source == "s3://x/fast"
    # the slow run writes its last part after the fast one ended: it is the latest now
    slow.add(base.granules[2])
    slow.flush(header_of(replace(base, source="s3://x/slow", granules=(),
                                 finished="2026-01-02T00:00:00+00:00"), slow.uid, ""))
    report = read_report(dest, storage_options=s3_storage_options)
    assert report.source == "s3://x/slow" and report.finished == "2026-01-02T00:00:00+00:00"
    assert [g.name for g in report.granules] == [g.name for g in base.granules]
    assert report.carried_over == 1  # the fast run's granule


def test_without_a_cache_every_reader_loads_a_temporary_mirror(
        s3, s3_bucket: str, s3_storage_options, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H5SIDECAR_RECORD_CACHE", "")
    dest = f"s3://{s3_bucket}/out"
    base = _synthetic(5, s3_bucket)
    write_report(base, dest, storage_options=s3_storage_options)
    fs, root = _record_store.store_of(dest, s3_storage_options)
    with _record_store.Mirror(fs, root) as mirror:
        assert mirror.read == 1
    assert read_report(dest, storage_options=s3_storage_options).granules == base.granules


def test_an_unusable_cache_folder_costs_a_full_load_not_the_run(
        s3, s3_bucket: str, s3_storage_options, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    """A cache folder that cannot be made (here: under a file; likewise a read-only or full
    disk) is logged and skipped: the reader loads every part into a temporary mirror."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("H5SIDECAR_RECORD_CACHE", str(blocker / "records"))
    dest = f"s3://{s3_bucket}/out"
    base = _synthetic(5, s3_bucket)
    write_report(base, dest, storage_options=s3_storage_options)
    fs, root = _record_store.store_of(dest, s3_storage_options)
    with _record_store.Mirror(fs, root) as mirror:
        assert not mirror.cached and mirror.read == 1
    assert read_report(dest, storage_options=s3_storage_options).granules == base.granules


def test_the_gateway_and_the_catalog_read_the_newest_rows_from_the_cache(
        s3, s3_bucket: str, s3_storage_options, reads: _Reads) -> None:
    from h5sidecar.dest import _record_parts

    dest = f"s3://{s3_bucket}/out"
    _history(400, s3_bucket, dest, s3_storage_options)
    fs, root = _record_store.store_of(dest, s3_storage_options)
    columns = ["url", "name", "sidecar", "status", "source_url", "n_chunks"]
    from_cache = _record_store.latest_rows(fs, root, columns)
    assert from_cache is not None and from_cache == _record_parts.latest_rows(fs, root, columns)
    assert from_cache.num_rows == 399
    reads.clear()
    path = _record_store.cached_record(fs, root)
    assert path is not None
    view = RecordView(path, dest)  # what the gateway reads: the roots, a lookup per source
    assert view.roots() == (f"s3://{s3_bucket}/elsewhere",) and view.count() == 398
    assert view.is_source(f"s3://{s3_bucket}/old/g00000.h5")
    assert not view.is_source(f"s3://{s3_bucket}/old/g00001.h5")  # failed since
    assert reads.parts() == set()  # nothing written since: no part read again


def test_the_cache_folder_comes_from_the_settings_object(
        s3, s3_bucket: str, s3_storage_options, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from h5sidecar.settings import RecordSettings, from_env

    assert from_env(RecordSettings, env={"H5SIDECAR_RECORD_CACHE": ""}).cache_folder() is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert RecordSettings().cache_folder() == str(tmp_path / "xdg" / "h5sidecar" / "records")
    assert from_env(RecordSettings, env={"H5SIDECAR_RECORD_CACHE_MAX_AGE_DAYS": "2.5"}
                    ).record_cache_max_age_days == 2.5  # fmt: skip
    assert RecordSettings().record_mark_margin_s == 3600
    assert from_env(RecordSettings, env={"H5SIDECAR_RECORD_MARK_MARGIN_S": "60"}
                    ).record_mark_margin_s == 60  # fmt: skip
    dest = f"s3://{s3_bucket}/out"
    base = _synthetic(5, s3_bucket)
    write_report(base, dest, storage_options=s3_storage_options)
    fs, root = _record_store.store_of(dest, s3_storage_options)
    given = RecordSettings(record_cache=str(tmp_path / "given"))  # not $H5SIDECAR_RECORD_CACHE
    with _record_store.Mirror(fs, root, settings=given) as mirror:
        assert mirror.cached and mirror.read == 1
        assert [(r.url, r.status) for r, _, _ in mirror.record.lookup(
            [g.url for g in base.granules])] == [(g.url, "ok") for g in base.granules]
    assert [p.name for p in (tmp_path / "given").glob("*.sqlite")] == [
        os.path.basename(_record_cache.cache_file(fs, root, given) or "")]
    with _record_store.Mirror(fs, root, settings=RecordSettings(record_cache="")) as mirror:
        assert not mirror.cached and mirror.read == 1


def test_cache_files_of_dests_no_longer_used_go_when_a_new_one_is_made(
        s3, s3_bucket: str, s3_storage_options, tmp_path: Path) -> None:
    from h5sidecar.settings import RecordSettings

    settings = RecordSettings(record_cache=str(tmp_path / "c"), record_cache_max_age_days=30)
    files = {}
    for name in ("old", "recent", "new"):
        dest = f"s3://{s3_bucket}/{name}"
        write_report(replace(_synthetic(2, s3_bucket), dest=dest), dest,
                     storage_options=s3_storage_options)  # fmt: skip
        fs, root = _record_store.store_of(dest, s3_storage_options)
        files[name] = (fs, root, _record_cache.cache_file(fs, root, settings) or "")
        if name == "new":
            break
        with _record_store.Mirror(fs, root, settings=settings):
            pass
    day = 86_400
    stray = tmp_path / "c" / "notes.sqlite"  # not a cache file: never removed
    stray.write_text("")
    now = time.time()
    for path, age in ((files["old"][2], 40), (files["recent"][2], 10), (str(stray), 400)):
        for p in (path, path + "-wal"):
            if os.path.exists(p):
                os.utime(p, (now - age * day, now - age * day))
    # using a cache touches it: "recent" read again is as new as can be
    fs, root, path = files["recent"]
    with _record_store.Mirror(fs, root, settings=settings):
        pass
    assert os.stat(path).st_mtime > now - day
    # a new DEST's cache is made: the one unused for 40 days goes (with its WAL), nothing else
    fs, root, path = files["new"]
    with _record_store.Mirror(fs, root, settings=settings) as mirror:
        assert mirror.cached
    left = sorted(p.name for p in (tmp_path / "c").iterdir() if p.name.endswith(".sqlite"))
    assert left == sorted([os.path.basename(files["recent"][2]), os.path.basename(path),
                           "notes.sqlite"])  # fmt: skip
    assert not [p for p in (tmp_path / "c").iterdir()
                if p.name.startswith(os.path.basename(files["old"][2]))]
    # the removed DEST is read again: one full load, as on a new machine
    fs, root, _ = files["old"]
    with _record_store.Mirror(fs, root, settings=settings) as mirror:
        assert mirror.cached and mirror.read == 1
    # max age 0: never removed, even when a new file is made
    never = RecordSettings(record_cache=str(tmp_path / "c"), record_cache_max_age_days=0)
    aged = files["recent"][2]
    os.utime(aged, (now - 400 * day, now - 400 * day))
    fs, root, path = files["new"]
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    with _record_store.Mirror(fs, root, settings=never) as mirror:
        assert mirror.cached and mirror.read == 1
    assert os.path.exists(aged)
