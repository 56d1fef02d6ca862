"""The record of a local DEST (``DEST/_h5sidecar.sqlite``): written per granule as each
finishes, safe under ``kill -9`` and concurrent runs, migrated from an old ``_report.json``,
exported by ``h5sidecar report DEST --json``."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from h5sidecar.cli import main
from h5sidecar.dest import _record_db
from h5sidecar.dest._report_io import merge_reports
from h5sidecar.errors import InvalidReferenceError
from h5sidecar.workflows import index_many, read_report
from tests._cli_launch import h5sidecar_command
from tests.workflows.conftest import assert_matches_h5py, write_granule

RECORD = "_h5sidecar.sqlite"


def _rows(dest: Path) -> dict[str, tuple[str, int, float]]:
    """``url -> (status, run, updated)`` of every granule row, read as a plain reader would."""
    path = dest / RECORD
    if not path.exists():
        return {}
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        return {u: (s, r, t) for u, s, r, t in
                db.execute("SELECT url, status, run, updated FROM granules")}
    finally:
        db.close()


def _granules(folder: Path, n: int, *, size: int = 2_000, prefix: str = "G") -> None:
    for i in range(n):
        write_granule(folder / f"{prefix}{i:02d}.h5", seed=i, n=size)


def _export(dest: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    main(["report", str(dest), "--json"])
    return json.loads(capsys.readouterr().out)


def test_sigkill_keeps_finished_rows_and_a_rerun_does_not_redo_them(tmp_path: Path) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    _granules(src, 16, size=20_000)
    # one worker and checksums (reads every chunk) keep the batch busy long enough to kill it
    cmd = h5sidecar_command("index", str(src), "-o", str(dest), "--workers", "1", "--checksums")
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=err)
    try:
        deadline = time.monotonic() + 120
        while len(_rows(dest)) < 2:  # rows appear while the run goes on, not at its end
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI, the fork server and the workers
        proc.wait()
    db = sqlite3.connect(dest / RECORD)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    killed = read_report(str(dest))
    assert not killed.complete and 2 <= len(killed.granules) < 16
    assert killed.counts == {"ok": len(killed.granules), "failed": 0, "up_to_date": 0}
    for g in killed.granules:  # every recorded granule has its complete sidecar
        assert_matches_h5py(g.sidecar, Path(g.url))

    again = index_many(str(src), str(dest), executor="serial")
    assert again.ok and again.complete
    status = {g.url: g.status for g in again.granules}
    assert all(status[g.url] == "up_to_date" for g in killed.granules)  # not redone
    chunks = {g.url: g.n_chunks for g in again.granules}
    assert all(chunks[g.url] == g.n_chunks > 0 for g in killed.granules)  # kept from the row
    assert read_report(str(dest)).counts["ok"] + read_report(str(dest)).counts["up_to_date"] == 16


def test_concurrent_runs_on_one_dest_lose_no_rows(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    folders = [tmp_path / "a", tmp_path / "b"]
    for k, folder in enumerate(folders):
        _granules(folder, 8, prefix="AB"[k])
    procs = [subprocess.Popen(h5sidecar_command("index", str(f), "-o", str(dest), "--serial"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for f in folders]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    report = read_report(str(dest))
    assert len(report.granules) == 16 and report.counts["ok"] == 16
    assert {str(f) for f in folders} <= set(report.roots)
    assert len({r for _, r, _ in _rows(dest).values()}) == 2  # each run wrote its own rows
    for name in ("A03.h5", "B07.h5"):
        g = next(g for g in report.granules if g.name == name)
        assert_matches_h5py(g.sidecar, Path(g.url))


def test_report_json_is_the_old_report_document(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    _granules(src, 3)
    (src / "bad.h5").write_bytes(b"not HDF5\n" * 100)
    first = index_many(str(src), str(dest), format="json", executor="serial")
    assert _export(dest, capsys) == first.to_dict()  # what _report.json held
    assert not (dest / "_report.json").exists()
    before = _rows(dest)

    write_granule(src / "G01.h5", seed=42, n=2_000)  # changed: the second run touches only it
    second = index_many(str(src / "G01.h5"), str(dest), format="json", executor="serial")
    # the old merged document, and one row written for the one granule touched
    assert _export(dest, capsys) == merge_reports(first, second).to_dict()
    after = _rows(dest)
    assert {u for u in after if after[u] != before[u]} == {str(src / "G01.h5")}
    assert_matches_h5py(str(dest / "G01.h5.json"), src / "G01.h5")

    capsys.readouterr()
    assert main(["report", str(dest)]) == 1  # a granule failed
    out = capsys.readouterr().out
    assert "3 indexed" in out and "1 failed" in out and "bad.h5" in out and "not_hdf5" in out
    assert main(["report", str(tmp_path / "elsewhere")]) == 2
    assert "has no run report" in capsys.readouterr().err


def test_an_old_dest_is_migrated_on_first_write(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    _granules(src, 3)
    # an old DEST: the document the JSON writer wrote, no record
    old = index_many(str(src), str(dest), format="json", executor="serial")
    (dest / RECORD).unlink()
    doc = json.loads(json.dumps(old.to_dict()))
    (dest / "_report.json").write_text(json.dumps(doc, indent=1))
    assert read_report(str(dest)) == old and _export(dest, capsys) == doc  # read, not migrated
    assert not (dest / RECORD).exists()

    again = index_many(str(src), str(dest), format="json", executor="serial")
    assert again.counts == {"ok": 0, "failed": 0, "up_to_date": 3}
    assert [g.n_chunks for g in again.granules] == [g.n_chunks for g in old.granules]
    assert (dest / RECORD).is_file() and not (dest / "_report.json").exists()
    assert json.loads((dest / "_report.json.migrated").read_text()) == doc  # kept, not read
    assert read_report(str(dest)).granules == again.granules
    assert not [p.name for p in dest.iterdir() if p.name.endswith(".tmp")]
    assert_matches_h5py(str(dest / "G02.h5.json"), src / "G02.h5")


def test_a_crash_mid_migration_leaves_the_json_authoritative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    _granules(src, 2)
    old = index_many(str(src), str(dest), format="json", executor="serial")
    (dest / RECORD).unlink()
    (dest / "_report.json").write_text(json.dumps(old.to_dict()))

    def crash(*args: object) -> None:
        raise KeyboardInterrupt  # interrupted after the rows were imported, before the link

    monkeypatch.setattr(_record_db.os, "link", crash)
    with pytest.raises(KeyboardInterrupt):
        index_many(str(src), str(dest), format="json", executor="serial")
    monkeypatch.undo()
    assert sorted(p.name for p in dest.iterdir() if p.name.startswith(("_", "._"))
                  and p.name != "_h5sidecar.lock") == [
        "_report.json"]  # no record, no temporary: the JSON still rules
    assert read_report(str(dest)) == old
    assert index_many(str(src), str(dest), format="json", executor="serial").ok
    assert (dest / RECORD).is_file() and len(read_report(str(dest)).granules) == 2


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    _granules(src, 1)
    index_many(str(src), str(dest), executor="serial")
    db = sqlite3.connect(dest / RECORD)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(InvalidReferenceError, match="schema version 99"):
        read_report(str(dest))


def test_a_malformed_old_report_is_replaced_by_the_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    _granules(src, 2)
    dest.mkdir()
    (dest / "_report.json").write_text("{not json")
    with caplog.at_level("WARNING", logger="h5sidecar.workflows"):
        report = index_many(str(src), str(dest), executor="serial")
    assert report.ok and "the record starts empty" in caplog.text
    assert [g.name for g in read_report(str(dest)).granules] == ["G00.h5", "G01.h5"]
    assert_matches_h5py(str(dest / "G01.h5.parq"), src / "G01.h5")


def test_the_catalog_and_the_gateway_read_the_record(tmp_path: Path) -> None:
    from h5sidecar.catalog import list_indexed
    from h5sidecar.gateway._dest import DestIndex

    src, dest = tmp_path / "in", tmp_path / "out"
    _granules(src, 2)
    index_many(str(src), str(dest), executor="serial")
    (src / "G01.h5").write_bytes(b"no longer HDF5\n" * 100)  # its old sidecar stays
    assert not index_many(str(src), str(dest), executor="serial").ok
    assert (dest / "G01.h5.parq").is_dir() and not (dest / "_report.json").exists()
    # the record marks G01 failed: the catalog leaves it out, the gateway allows the root
    assert [g.name for g in list_indexed(str(dest))] == ["G00.h5"]
    snap = DestIndex(str(dest)).snapshot()
    assert snap.report_found and snap.sources == (str(src),) and snap.record is not None
    # a granule's own source is looked up in the record (not listed: a million of them)
    assert snap.record.is_source(str(src / "G00.h5"))
    assert not snap.record.is_source(str(src / "G01.h5"))
    assert_matches_h5py(str(dest / "G00.h5.parq"), src / "G00.h5")


def test_a_transaction_an_interrupt_left_open_is_dropped_not_fatal(tmp_path: Path) -> None:
    """Ctrl-C landing between ``BEGIN`` and the guard that rolls back leaves the connection in
    a transaction: the run's closing write (its report, ``complete: false``) must still be
    made, and nothing of the interrupted write committed."""
    src, dest = tmp_path / "in", tmp_path / "out"
    _granules(src, 2)
    report = index_many(str(src), str(dest), executor="serial")
    record = _record_db.open_record(str(dest))
    try:
        run = record.begin_run(report)
        record._db.execute("BEGIN IMMEDIATE")  # where the interrupt left it
        record._db.execute("DELETE FROM granules")  # half of a write, never committed
        record.end_run(run, finished=report.finished, seconds=1.0, complete=False)
    finally:
        record.close()
    assert {g.name for g in read_report(str(dest)).granules} == {"G00.h5", "G01.h5"}


def test_what_changed_since_a_mark_is_found_through_the_seq_index() -> None:
    """A cube's append asks the record what was written since its mark: the query searches
    the ``seq`` index, rather than walking every granule in name order (the plan SQLite
    chose for ``ORDER BY name``, 0.46 s at a million granules for one changed row)."""
    from h5sidecar.dest._record_sql import SCHEMA

    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)
    db.executemany(
        "INSERT INTO granules (url, name, sidecar, status, n_virtual, n_inlined, n_skipped, "
        "skipped, n_chunks, sidecar_bytes, seconds, run, updated, seq) "
        "VALUES (?, ?, ?, 'ok', 0, 0, 0, '[]', 0, 0, '{}', 1, 0, ?)",
        [(f"/s/g{i:05d}.nc", f"g{i:05d}.nc", f"/d/g{i:05d}.nc.json", 1 + i // 500)
         for i in range(3000)])
    plan = " ".join(r[-1] for r in db.execute(f"EXPLAIN QUERY PLAN {_record_db.CHANGED_SINCE}",
                                               (5,)))
    assert "USING INDEX granules_by_seq" in plan, plan
    got = db.execute(_record_db.CHANGED_SINCE, (5,)).fetchall()
    assert got == [(f"g{i:05d}.nc", f"/d/g{i:05d}.nc.json") for i in range(2500, 3000)]
