"""The record of an object-store DEST in parts (moto S3): O(1) writes per run, kill -9 and
concurrent runs lose no row, migration of ``_report.json``, compaction, export."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from h5sidecar.cli import main
from h5sidecar.dest import _record_store
from h5sidecar.dest._report import GranuleResult, RunReport
from h5sidecar.dest._report_io import RunRecorder
from h5sidecar.workflows import index_many, read_report, write_report
from tests.workflows.conftest import assert_matches_h5py, write_granule

PARTS = "_h5sidecar_record"


def _parts(s3: Any, dest: str) -> list[str]:
    s3.invalidate_cache()
    try:
        return sorted(p for p in s3.ls(f"{dest}/{PARTS}") if p.endswith(".parquet"))
    except FileNotFoundError:
        return []


def _rows(s3: Any, part: str) -> list[dict[str, Any]]:
    with s3.open(part, "rb") as f:
        return pq.read_table(f).to_pylist()  # type: ignore[no-any-return]


def _synthetic(n: int, bucket: str) -> RunReport:
    """A report of ``n`` granules of another source root (none of them an orphan here)."""
    granules = tuple(GranuleResult(
        url=f"s3://{bucket}/old/g{i:05d}.h5", sidecar=f"s3://{bucket}/out/old/g{i:05d}.h5.parq",
        status="ok", name=f"old/g{i:05d}.h5", n_virtual=2, n_chunks=3, sidecar_bytes=100,
        source={"url": f"s3://{bucket}/old/g{i:05d}.h5", "size": 10, "etag": "e",
                "mtime": None}) for i in range(n))
    return RunReport(source=f"s3://{bucket}/old", dest=f"s3://{bucket}/out", format="parquet",
                     options={}, started="2026-01-01T00:00:00+00:00",
                     finished="2026-01-01T00:00:00+00:00", seconds=1.0, granules=granules,
                     version="0")



def _history(n: int, bucket: str, dest: str, options: dict[str, Any]) -> RunReport:
    """``n`` synthetic granules (sources outside the run's root) recorded in parts, then:
    the second failed since, the third pruned (a tombstone), the fourth failed then ok again."""
    from h5sidecar.dest._report_io import forget_sidecars

    base = replace(_synthetic(n, bucket), source=f"s3://{bucket}/elsewhere")
    g1, g2, g3 = base.granules[1:4]
    write_report(base, dest, storage_options=options)
    write_report(replace(base, granules=(replace(g1, status="failed"),
                                         replace(g3, status="failed"))),
                 dest, storage_options=options)  # fmt: skip
    forget_sidecars(None, dest, [g2.sidecar], storage_options=options)
    write_report(replace(base, granules=(g3,)), dest, storage_options=options)
    return base

def _granules(tmp_path: Path, s3: Any, bucket: str, n: int) -> dict[str, Path]:
    local = {f"G{i}.h5": write_granule(tmp_path / f"G{i}.h5", seed=i, n=1500) for i in range(n)}
    for name, path in local.items():
        s3.put(str(path), f"{bucket}/in/{name}")
    return local


def test_a_run_touching_one_granule_writes_one_row(tmp_path: Path, s3, s3_bucket: str,
                                                    s3_storage_options) -> None:
    dest = f"s3://{s3_bucket}/out"
    write_report(_synthetic(3000, s3_bucket), dest, storage_options=s3_storage_options)
    local = _granules(tmp_path, s3, s3_bucket, 2)
    source = f"s3://{s3_bucket}/in"
    assert index_many(source, dest, storage_options=s3_storage_options, executor="serial").ok
    before = _parts(s3, f"{s3_bucket}/out")
    write_granule(tmp_path / "new.h5", seed=9, n=1700)
    s3.put(str(tmp_path / "new.h5"), f"{s3_bucket}/in/G1.h5")
    again = index_many(source, dest, storage_options=s3_storage_options, executor="serial")
    assert {g.name: g.status for g in again.granules} == {"G0.h5": "up_to_date", "G1.h5": "ok"}
    new = [p for p in _parts(s3, f"{s3_bucket}/out") if p not in before]
    # one part, holding the one granule re-indexed (and the run's header), a few KB: not the
    # 3002 granules recorded
    assert len(new) == 1 and [r["name"] for r in _rows(s3, new[0])] == ["G1.h5"]
    assert s3.info(new[0])["size"] < 20_000
    assert not s3.exists(f"{s3_bucket}/out/_report.json")
    # a no-op run writes its header only
    noop = index_many(source, dest, storage_options=s3_storage_options, executor="serial")
    assert noop.counts["up_to_date"] == 2
    last = [p for p in _parts(s3, f"{s3_bucket}/out") if p not in before and p not in new]
    assert len(last) == 1 and _rows(s3, last[0]) == []
    report = read_report(dest, storage_options=s3_storage_options)
    # G0's row, found up to date, stays as written (as in a local record)
    assert report.n_granules == 3002 and report.counts["ok"] == 3002
    assert report.carried_over == 3000
    g1 = next(g for g in report.granules if g.name == "G1.h5")
    assert g1.status == "ok" and g1.n_chunks > 0
    assert_matches_h5py(f"{dest}/G1.h5.parq", tmp_path / "new.h5", s3_storage_options,
                        remote_protocol="s3")
    assert_matches_h5py(f"{dest}/G0.h5.parq", local["G0.h5"], s3_storage_options,
                        remote_protocol="s3")


_KILLED_RUN = textwrap.dedent("""
    import contextlib, sys, time
    from h5sidecar.dest import _report_io
    from h5sidecar.workflows import index_many
    with contextlib.suppress(ImportError):
        from h5sidecar.dest import _parts_writer
        _parts_writer.FLUSH_GRANULES = 1
    real, calls = _report_io.RunRecorder.put, []
    def put(self, result):
        calls.append(result.url)
        if len(calls) == 3:  # the first two are recorded and written as parts by now
            print("ready", flush=True)
            time.sleep(600)
        return real(self, result)
    _report_io.RunRecorder.put = put
    options = dict(endpoint_url=sys.argv[3], key="testing", secret="testing", token="testing")
    index_many(sys.argv[1], sys.argv[2], storage_options=options, executor="serial")
""")


def test_kill_9_during_a_run_keeps_its_written_parts(tmp_path: Path, s3, s3_bucket: str,
                                                      s3_storage_options) -> None:
    local = _granules(tmp_path, s3, s3_bucket, 4)
    source, dest = f"s3://{s3_bucket}/in", f"s3://{s3_bucket}/out"
    child = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, source, dest,
                              str(s3_storage_options["endpoint_url"])],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    # the killed run's temporary mirror of the record is left behind, and swept once stale
    left = list(Path(tempfile.gettempdir()).glob(f"{_record_store.MIRROR_PREFIX}{child.pid}-*"))
    assert left
    _record_store.sweep_stale_mirrors(older_than=0)
    assert not any(p.exists() for p in left)
    parts = _parts(s3, f"{s3_bucket}/out")
    # every part is whole (readable Parquet), one granule each; nothing half-written
    assert [[r["name"] for r in _rows(s3, p)] for p in parts] == [["G0.h5"], ["G1.h5"]]
    killed = read_report(dest, storage_options=s3_storage_options)
    assert [(g.name, g.status) for g in killed.granules] == [("G0.h5", "ok"), ("G1.h5", "ok")]
    assert not killed.complete
    # the next run finds them up to date (G2's too: its sidecar was written, its row was not)
    # and indexes the rest
    rerun = index_many(source, dest, storage_options=s3_storage_options, executor="serial")
    assert {g.name: g.status for g in rerun.granules} == {
        "G0.h5": "up_to_date", "G1.h5": "up_to_date", "G2.h5": "up_to_date", "G3.h5": "ok"}
    assert read_report(dest, storage_options=s3_storage_options).n_granules == 4
    for name, path in local.items():
        assert_matches_h5py(f"{dest}/{name}.parq", path, s3_storage_options,
                            remote_protocol="s3")


def test_concurrent_runs_keep_both_runs_rows(tmp_path: Path, s3, s3_bucket: str,
                                             s3_storage_options, monkeypatch) -> None:
    local = _granules(tmp_path, s3, s3_bucket, 2)
    for name in local:  # two sources, one DEST (as two prefixes of a collection)
        s3.mv(f"{s3_bucket}/in/{name}", f"{s3_bucket}/in/{name[:2]}/{name}")
    dest = f"s3://{s3_bucket}/out"
    barrier = threading.Barrier(2, timeout=120)
    real = RunRecorder.put

    def together(self: RunRecorder, result: GranuleResult) -> None:
        barrier.wait()  # both runs have read the record and indexed their granule
        real(self, result)

    monkeypatch.setattr(RunRecorder, "put", together)
    reports: dict[str, RunReport] = {}

    def run(prefix: str) -> None:
        reports[prefix] = index_many(f"s3://{s3_bucket}/in/{prefix}", dest, executor="serial",
                                     storage_options=s3_storage_options)

    threads = [threading.Thread(target=run, args=(p,)) for p in ("G0", "G1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert all(r.ok for r in reports.values()) and len(reports) == 2
    report = read_report(dest, storage_options=s3_storage_options)
    assert sorted((g.name, g.status) for g in report.granules) == [("G0.h5", "ok"),
                                                                    ("G1.h5", "ok")]
    assert set(report.roots) == {f"s3://{s3_bucket}/in/G0", f"s3://{s3_bucket}/in/G1"}
    for name, path in local.items():
        assert_matches_h5py(f"{dest}/{name}.parq", path, s3_storage_options,
                            remote_protocol="s3")


def test_an_old_report_json_is_migrated_and_exported_whole(
        tmp_path: Path, s3, s3_bucket: str, s3_storage_options,
        capsys: pytest.CaptureFixture[str]) -> None:
    old = _synthetic(5, s3_bucket)
    s3.pipe(f"{s3_bucket}/out/_report.json", json.dumps(old.to_dict()).encode())
    dest = f"s3://{s3_bucket}/out"
    assert read_report(dest, storage_options=s3_storage_options) == old  # read as it is
    local = _granules(tmp_path, s3, s3_bucket, 1)
    assert index_many(f"s3://{s3_bucket}/in", dest, storage_options=s3_storage_options,
                      executor="serial").ok
    assert not s3.exists(f"{s3_bucket}/out/_report.json")
    assert s3.exists(f"{s3_bucket}/out/_report.json.migrated")  # kept, never read again
    report = read_report(dest, storage_options=s3_storage_options)
    assert [g.name for g in report.granules] == ["G0.h5", *(g.name for g in old.granules)]
    assert report.roots == (f"s3://{s3_bucket}/old", f"s3://{s3_bucket}/in")
    assert [g for g in report.granules if g.name != "G0.h5"] == list(old.granules)
    # the export is the whole document, streamed
    opts = [f"--storage-option=endpoint_url={s3_storage_options['endpoint_url']}",
            "--storage-option=key=testing", "--storage-option=secret=testing"]
    assert main(["report", dest, "--json", *opts]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert RunReport.from_dict(doc) == replace(report, omitted={})
    assert doc["counts"] == {"ok": 6, "failed": 0, "up_to_date": 0}
    assert_matches_h5py(f"{dest}/G0.h5.parq", local["G0.h5"], s3_storage_options,
                        remote_protocol="s3")


def test_compaction_keeps_the_newest_rows_in_one_part(tmp_path: Path, s3, s3_bucket: str,
                                                      s3_storage_options, monkeypatch) -> None:
    dest = f"s3://{s3_bucket}/out"
    base = _synthetic(6, s3_bucket)
    write_report(base, dest, storage_options=s3_storage_options)
    # later reports of fewer granules: a granule re-recorded (failed now), others carried
    g = base.granules[2]
    for i in range(4):
        failed = replace(g, status="failed", n_chunks=i)
        write_report(replace(base, granules=(failed,), finished=f"2026-01-0{i + 2}T00:00:00+00:00"),
                     dest, storage_options=s3_storage_options)
    before = read_report(dest, storage_options=s3_storage_options)
    assert len(_parts(s3, f"{s3_bucket}/out")) == 5
    monkeypatch.setattr(_record_store, "COMPACT_PARTS", 3)
    local = _granules(tmp_path, s3, s3_bucket, 1)
    index_many(f"s3://{s3_bucket}/in", dest, storage_options=s3_storage_options,
               executor="serial")
    assert len(_parts(s3, f"{s3_bucket}/out")) == 1
    after = read_report(dest, storage_options=s3_storage_options)
    assert [x for x in after.granules if x.name != "G0.h5"] == list(before.granules)
    assert next(x for x in after.granules if x.url == g.url).n_chunks == 3
    assert_matches_h5py(f"{dest}/G0.h5.parq", local["G0.h5"], s3_storage_options,
                        remote_protocol="s3")


def test_a_compaction_never_removes_a_part_it_did_not_cover(s3, s3_bucket: str,
                                                           s3_storage_options) -> None:
    dest = f"s3://{s3_bucket}/out"
    base = _synthetic(3, s3_bucket)
    for i in range(3):
        write_report(replace(base, granules=base.granules[i:i + 1]), dest,
                     storage_options=s3_storage_options)
    fs, root = _record_store.store_of(dest, s3_storage_options)
    listed = _record_store.list_parts(fs, root)
    # a run writes a part after the compaction listed the parts: it stays, with its row
    late = write_report(replace(base, granules=(replace(base.granules[0], status="failed"),)),
                        dest, storage_options=s3_storage_options)
    real = _record_store.list_parts
    try:
        _record_store.list_parts = lambda *_: listed  # type: ignore[assignment]
        _record_store.compact(fs, root, threshold=1)
    finally:
        _record_store.list_parts = real
    left = _parts(s3, f"{s3_bucket}/out")
    assert late.split("://", 1)[1] in left and len(left) == 2
    report = read_report(dest, storage_options=s3_storage_options)
    assert [(x.name, x.status) for x in report.granules] == [
        ("old/g00000.h5", "failed"), ("old/g00001.h5", "ok"), ("old/g00002.h5", "ok")]


def test_gateway_and_catalog_read_the_newest_rows_of_the_parts(s3, s3_bucket: str,
                                                               s3_storage_options) -> None:
    from h5sidecar.dest._sidecar_listing import list_indexed
    from h5sidecar.gateway._dest import DestIndex

    dest = f"s3://{s3_bucket}/out"
    base = _history(4, s3_bucket, dest, s3_storage_options)
    g0, g1, g2, g3 = base.granules
    for g in base.granules:  # the sidecars the catalog lists (their content is not read)
        s3.pipe(g.sidecar.split("://", 1)[1].replace(".parq", ".json"), b"{}")
    snap = DestIndex(dest, storage_options=s3_storage_options).snapshot()
    assert snap.report_found
    # sources outside the runs' roots are allowed by their granule's row, not listed
    assert snap.sources == (f"s3://{s3_bucket}/elsewhere",) and snap.record is not None
    assert [snap.record.is_source(g.url) for g in base.granules] == [True, False, False, True]
    assert [g.name for g in list_indexed(dest, storage_options=s3_storage_options,
                                         sizes=False)] == [g0.name, g2.name, g3.name]
    assert [(g.name, g.status) for g in read_report(
        dest, storage_options=s3_storage_options).granules] == [
        (g0.name, "ok"), (g1.name, "failed"), (g3.name, "ok")]


def test_only_stale_mirrors_of_gone_processes_are_swept(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(gone.stdout)
    prefix = _record_store.MIRROR_PREFIX
    made = {name: tmp_path / name for name in (
        f"{prefix}{dead}-old", f"{prefix}{dead}-fresh", f"{prefix}{os.getpid()}-mine",
        f"{prefix}abcdef")}  # the last: a mirror of an earlier version, no pid in its name
    for name, folder in made.items():
        folder.mkdir()
        (folder / "record.sqlite").write_bytes(b"x")
        if not name.endswith("fresh"):
            for f in (folder / "record.sqlite", folder):
                os.utime(f, (1e9, 1e9))
    assert _record_store.sweep_stale_mirrors(str(tmp_path)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        n for n in made if not n.endswith("-old"))
