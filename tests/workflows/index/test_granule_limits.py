"""The per-granule time limit in every executor, on a granule HDF5 loops on in C.

The looping granule (``_looping.write_looping_granule``) makes HDF5 walk a chunk B-tree of
shared nodes from its cache: no read, so the indexer's checks at each read never run, and the
GIL is held, so no signal handler or watchdog thread runs either.  Only ending the process that
runs it bounds it.  The Dask executor is checked on the cluster of ``test_dask.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import psutil
import pytest

from h5sidecar.cli import main
from h5sidecar.settings import IndexSettings
from h5sidecar.workflows import GranuleResult, RunReport, index_many, read_report
from h5sidecar.workflows.index._executors import Task, run_tasks
from tests.workflows._looping import write_crashing_granule, write_looping_granule
from tests.workflows.conftest import assert_matches_h5py, write_granule

#: the limit the tests run with (s); a worker still busy 2 s later is ended
LIMIT = 2.0


def batch_folder(root: Path) -> Path:
    """Two good granules, one HDF5 loops on, one HDF5 crashes on."""
    src = root / "src"
    write_granule(src / "a_good.h5", seed=1)
    write_looping_granule(src / "b_loops.h5")
    write_crashing_granule(src / "c_crashes.h5")
    write_granule(src / "d_good.h5", seed=2)
    return src


def check_bounded_report(report: RunReport, src: Path, took: float) -> None:
    """The looping granule failed with ``timeout``, the crashing one with ``worker_crashed``,
    the good ones match h5py, and the batch ended within a bound."""
    by_name = {g.name: g for g in report.granules}
    loops, crashes = by_name["b_loops.h5"], by_name["c_crashes.h5"]
    assert loops.status == "failed" and loops.error is not None, loops
    assert loops.error.kind == "timeout", loops.error
    assert f"after {2 * LIMIT:g} s" in loops.error.message  # the limit plus its grace period
    assert "--max-granule-seconds" in loops.error.message
    assert "H5SIDECAR_MAX_GRANULE_SECONDS" in loops.error.hint
    assert crashes.status == "failed" and crashes.error is not None
    assert crashes.error.kind == "worker_crashed", crashes.error
    for name in ("a_good.h5", "d_good.h5"):
        assert by_name[name].status == "ok", by_name[name]
        assert_matches_h5py(by_name[name].sidecar, src / name)
    assert report.complete and report.counts == {"ok": 2, "failed": 2, "up_to_date": 0}
    assert took < 90, took  # ~2 x (limit + grace) and process starts, on a loaded machine


@pytest.mark.timeout(60)
def test_hdf5_loops_on_the_granule_without_reading(tmp_path: Path) -> None:
    path = write_looping_granule(tmp_path / "loops.h5")
    with h5py.File(path) as f:  # a sound file to every lookup
        assert list(f) == ["d", "ok"] and f["ok"][3] == 3 and f["d"][:3].tolist() == [0, 0, 0]
    code = ("from h5sidecar.indexer import index_granule; from h5sidecar.settings import "
            f"IndexSettings; index_granule({str(path)!r}, "
            "settings=IndexSettings(max_granule_seconds=0.5))")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(6)
        # the indexer's own time limit (checked at each read) did not stop it
        assert proc.poll() is None
        child = psutil.Process(proc.pid)
        rss = child.memory_info().rss
        time.sleep(1)
        assert child.memory_info().rss < rss + 50 * 2**20  # spinning, not allocating
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(180)
def test_serial_run_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # before: --serial ran HDF5 in the CLI's own process, which the looping granule held forever
    # (and the crashing one killed)
    src = batch_folder(tmp_path)
    t0 = time.monotonic()
    rc = main(["index", str(src), "-o", str(tmp_path / "out"), "--serial", "--format", "json",
               "--max-granule-seconds", f"{LIMIT:g}", "--json"])
    took = time.monotonic() - t0
    assert rc == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["counts"] == {"ok": 2, "failed": 2, "up_to_date": 0}
    check_bounded_report(read_report(str(tmp_path / "out")), src, took)


@pytest.mark.timeout(180)
def test_process_pool_run_is_bounded(tmp_path: Path) -> None:
    src = batch_folder(tmp_path)
    t0 = time.monotonic()
    report = index_many(str(src), str(tmp_path / "out"), format="json", executor="process",
                        workers=2, settings=IndexSettings(max_granule_seconds=LIMIT))
    check_bounded_report(report, src, time.monotonic() - t0)


def whose(url: str, sidecar: str, options: object, listed: object) -> GranuleResult:
    """A picklable task reporting the process that ran it (in ``n_chunks``)."""
    return GranuleResult(url=url, sidecar=sidecar, status="ok", n_chunks=os.getpid())


def test_serial_runs_in_this_process_only_without_a_limit() -> None:
    """Without a time limit ``serial`` stays in this process (for debuggers and profilers);
    with one, its granules run one by one in a worker process that can be ended."""
    tasks = [Task(u, u + ".json", (u, u + ".json", None, None)) for u in ("/a", "/b")]
    here = list(run_tasks(whose, tasks, "serial", workers=1))
    assert [r.n_chunks for r in here] == [os.getpid()] * 2
    bounded = list(run_tasks(whose, tasks, "serial", workers=4, time_limit=60))
    pids = {r.n_chunks for r in bounded}
    assert len(pids) == 1 and os.getpid() not in pids  # one worker, not this process


def test_the_default_limit() -> None:
    assert IndexSettings().max_granule_seconds == 300.0
