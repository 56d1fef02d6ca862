"""Incremental runs decided from DEST's record: a no-op re-run reads no sidecar and writes no
granule row, a change writes one row, leftovers are swept with one read of DEST, a record held
locked is a clear error, a version-1 record is upgraded, a large run's report holds counts."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from h5sidecar.cli import main
from h5sidecar.dest import _record_sql
from h5sidecar.errors import RecordBusyError
from h5sidecar.workflows import index_many, read_report
from h5sidecar.workflows.index import _index, _up_to_date
from tests.workflows.conftest import assert_matches_h5py, write_granule

RECORD = "_h5sidecar.sqlite"


def _rows(dest: Path) -> dict[str, tuple[str, int, float]]:
    """``url -> (status, run, updated)`` of every granule row."""
    db = sqlite3.connect(f"file:{dest / RECORD}?mode=ro", uri=True)
    try:
        return {u: (s, r, t) for u, s, r, t in
                db.execute("SELECT url, status, run, updated FROM granules")}
    finally:
        db.close()


def _granules(folder: Path, n: int) -> list[Path]:
    return [write_granule(folder / f"G{i:02d}.h5", seed=i, n=2_000) for i in range(n)]


@pytest.fixture
def sidecar_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sidecars whose extras block a run reads (in this process: ``executor="serial"``)."""
    seen: list[str] = []
    real = _up_to_date.read_recorded

    def counting(sidecar: str, **kw: object) -> object:
        seen.append(sidecar)
        return real(sidecar, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_up_to_date, "read_recorded", counting)
    return seen


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_a_noop_rerun_reads_no_sidecar_and_writes_no_row(
    tmp_path: Path, fmt: str, sidecar_reads: list[str]
) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    files = _granules(src, 4)
    first = index_many(str(src), str(dest), format=fmt, executor="serial")  # type: ignore[arg-type]
    assert first.counts["ok"] == 4
    before = _rows(dest)
    sidecar_reads.clear()

    again = index_many(str(src), str(dest), format=fmt, executor="serial")  # type: ignore[arg-type]
    assert again.counts == {"ok": 0, "failed": 0, "up_to_date": 4} and again.ok
    assert sidecar_reads == []  # decided from the record, not from the sidecars
    assert _rows(dest) == before  # not one granule row rewritten
    assert [(g.n_chunks, g.sidecar_bytes) for g in again.granules] == \
        [(g.n_chunks, g.sidecar_bytes) for g in first.granules]
    on_disk = read_report(str(dest))
    assert len(on_disk.granules) == 4 and on_disk.carried_over == 0 and not on_disk.orphaned

    write_granule(files[1], seed=99, n=3_000)  # a new size and mtime: re-indexed
    gone = dest / f"G02.h5.{'parq' if fmt == 'parquet' else 'json'}"
    shutil.rmtree(gone) if gone.is_dir() else gone.unlink()  # a sidecar gone: re-indexed
    third = index_many(str(src), str(dest), format=fmt, executor="serial")  # type: ignore[arg-type]
    status = {g.name: g.status for g in third.granules}
    assert status == {"G00.h5": "up_to_date", "G01.h5": "ok", "G02.h5": "ok",
                      "G03.h5": "up_to_date"}
    after = _rows(dest)
    assert {u for u in after if after[u] != before[u]} == {str(files[1]), str(files[2])}
    for f in files:
        assert_matches_h5py(str(dest / f"{f.name}.{'parq' if fmt == 'parquet' else 'json'}"), f)


def test_other_content_settings_reindex_from_the_record(tmp_path: Path) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    files = _granules(src, 2)
    index_many(str(src), str(dest), format="json", executor="serial")
    with_sums = index_many(str(src), str(dest), format="json", checksums=True,
                           executor="serial")
    assert with_sums.counts["ok"] == 2  # the record says the sidecars hold no checksums
    without = index_many(str(src), str(dest), format="json", executor="serial")
    assert without.counts["up_to_date"] == 2  # checksums serve a run that does not ask
    assert_matches_h5py(str(dest / "G01.h5.json"), files[1])


def test_leftovers_are_swept_with_one_read_of_dest(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    files = _granules(src, 12)
    index_many(str(src), str(dest), format="json", executor="serial")
    (dest / ".G03.h5.json.abc123.tmp").write_text("{")  # a killed write of a granule listed
    (dest / ".G07.h5.json.x_9.old").mkdir()
    (dest / ".other.h5.json.abc.tmp").write_text("{")  # another run's granule: left alone
    scans: list[str] = []
    real = os.scandir

    def counting(path: object = ".") -> object:
        scans.append(str(path))
        return real(path)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "scandir", counting)
    again = index_many(str(src), str(dest), format="json", executor="serial")
    assert again.counts["up_to_date"] == 12
    # one read of DEST per run, not one per granule (quadratic in the folder's size)
    assert scans.count(str(dest)) == 1
    left = sorted(p.name for p in dest.iterdir() if p.name.startswith("."))
    assert left == [".other.h5.json.abc.tmp"]
    assert_matches_h5py(str(dest / "G03.h5.json"), files[3])


def test_a_locked_record_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    files = _granules(src, 1)
    index_many(str(src), str(dest), format="json", executor="serial")
    monkeypatch.setattr(_record_sql, "BUSY_TIMEOUT_MS", 200)
    holder = sqlite3.connect(dest / RECORD, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing for longer than the wait
    try:
        with pytest.raises(RecordBusyError, match="locked"):
            index_many(str(src), str(dest), format="json", executor="serial")
        capsys.readouterr()
        assert main(["index", str(src), "-o", str(dest), "--serial"]) == 2
        err = capsys.readouterr().err
        assert "locked" in err and "Traceback" not in err
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert index_many(str(src), str(dest), format="json", executor="serial").ok
    assert_matches_h5py(str(dest / "G00.h5.json"), files[0])


def test_a_version_1_record_is_upgraded_in_place(tmp_path: Path,
                                                 sidecar_reads: list[str]) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    files = _granules(src, 3)
    first = index_many(str(src), str(dest), format="json", executor="serial")
    db = sqlite3.connect(dest / RECORD)  # what version 1 wrote: no content, confirmed, stamp
    db.execute("DROP INDEX granules_by_seq")  # nor what version 3 added: seq, seqs
    db.execute("DROP TABLE seqs")
    for table, column in (("runs", "content"), ("runs", "confirmed"), ("granules", "stamp"),
                          ("granules", "seq")):
        db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    assert read_report(str(dest)).granules == first.granules
    sidecar_reads.clear()
    again = index_many(str(src), str(dest), format="json", executor="serial")
    assert again.counts["up_to_date"] == 3 and len(sidecar_reads) == 3  # asked the sidecars
    before = _rows(dest)
    sidecar_reads.clear()
    third = index_many(str(src), str(dest), format="json", executor="serial")
    assert third.counts["up_to_date"] == 3 and sidecar_reads == [] and _rows(dest) == before
    db = sqlite3.connect(dest / RECORD)
    assert db.execute("PRAGMA user_version").fetchone() == (_record_sql.SCHEMA_VERSION,)
    db.close()
    assert_matches_h5py(str(dest / "G02.h5.json"), files[2])


def test_a_large_run_returns_failures_and_counts(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    files = _granules(src, 4)
    (src / "bad.h5").write_bytes(b"not HDF5\n" * 100)
    monkeypatch.setattr(_index, "HELD_RESULTS", 2)
    report = index_many(str(src), str(dest), format="json", executor="serial")
    assert report.counts == {"ok": 4, "failed": 1, "up_to_date": 0} and report.n_granules == 5
    assert len(report.granules) == 3 and any(g.status == "failed" for g in report.granules)
    assert report.to_dict()["omitted"] == {"ok": 2}
    full = read_report(str(dest))  # the record holds every granule
    assert len(full.granules) == 5 and full.counts == report.counts
    capsys.readouterr()
    assert main(["index", str(src), "-o", str(dest), "--format", "json", "--serial"]) == 1
    assert "5 granule(s)" in capsys.readouterr().out
    assert_matches_h5py(str(dest / "G03.h5.json"), files[3])


def _synthetic_dest(root: Path, n: int) -> tuple[Path, Path]:
    """``n`` hard links of one granule, their JSON sidecars and record rows (copied from one
    indexed for real, with each granule's URL and identity): a large DEST made in seconds."""
    src, dest = root / "in", root / "out"
    first = write_granule(src / "G0000000.h5", seed=0, n=2_000)
    index_many(str(first), str(dest), format="json", executor="serial")
    text = (dest / "G0000000.h5.json").read_text()
    db = sqlite3.connect(dest / RECORD)
    cols = [r[1] for r in db.execute("PRAGMA table_info(granules)")]
    row = db.execute("SELECT * FROM granules").fetchone()
    names = [f"G{i:07d}.h5" for i in range(n)]
    for name in names[1:]:  # linked first: adding links changes the file's ctime
        os.link(first, src / name)
    rows = []
    for name in names:
        url, sidecar = src / name, dest / f"{name}.json"
        sidecar.write_text(text.replace(str(first), str(url)))
        source = json.loads(row[cols.index("source")])
        st = url.stat()
        source.update(url=str(url), inode=st.st_ino, ctime_ns=st.st_ctime_ns,
                      mtime_ns=st.st_mtime_ns, mtime=st.st_mtime)
        values = dict(zip(cols, row, strict=True))
        stamp = sidecar.stat()
        values.update(url=str(url), name=name, sidecar=str(sidecar), source=json.dumps(source),
                      stamp=f"{stamp.st_size}:{stamp.st_mtime_ns}")
        rows.append(tuple(values[c] for c in cols))
    db.executemany(f"INSERT OR REPLACE INTO granules VALUES ({', '.join('?' * len(cols))})",
                   rows)
    db.commit()
    db.close()
    return src, dest


def _peak_rss_kb(*args: str) -> int:
    """Peak RSS of ``h5sidecar ARGS`` run in a child process (its main process only; VmHWM,
    not ``ru_maxrss``, which keeps the high-water mark of the forked parent across exec)."""
    prog = ("import sys\nfrom h5sidecar.cli import main\nrc = main(sys.argv[1:])\n"
            "sys.stdout.flush()\n"
            "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')]\n"
            "print(hwm[0].split()[1], file=sys.stderr)\n"
            "sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", prog, *args], capture_output=True, text=True,
                         check=False, cwd=Path(__file__).parents[2])
    assert res.returncode == 0, res.stderr[-2000:]
    return int(res.stderr.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's VmHWM")
def test_memory_of_rerun_prune_and_report_does_not_grow_with_granules(tmp_path: Path) -> None:
    peaks = {}
    for n in (10_000, 50_000):
        src, dest = _synthetic_dest(tmp_path / str(n), n)
        # no --json: printing the report's 10,000 held results would be the peak at both sizes
        index = _peak_rss_kb("index", str(src), "-o", str(dest), "--format", "json")
        prune = _peak_rss_kb("prune", str(dest), "--json")
        export = _peak_rss_kb("report", str(dest), "--json")
        peaks[n] = index, prune, export
        assert read_report(str(dest)).counts["ok"] == n
        assert_matches_h5py(str(dest / "G0000007.h5.json"), src / "G0000007.h5")
    # the listings (of the sources, of DEST) are staged on disk, the tasks streamed, the
    # results, rows and report never all held: 40,000 more granules cost ~10 MB in the re-run
    # (fixed-size caches filling; 1,000,000 cost what 100,000 do) and none in prune, where
    # they cost ~40 MB and ~180 MB when the listings, the tasks and the report were held
    (index10, prune10, export10), (index50, prune50, export50) = peaks[10_000], peaks[50_000]
    assert index50 - index10 < 25_000, peaks
    assert prune50 - prune10 < 15_000, peaks
    assert export50 - export10 < 15_000, peaks
