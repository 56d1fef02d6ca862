"""A batch killed mid-run (SIGKILL, whole process group) leaves no partial sidecar or report,
and a re-run completes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from h5sidecar.references import read_refs
from h5sidecar.workflows import index_many, read_report
from tests._cli_launch import h5sidecar_command
from tests.workflows.conftest import assert_matches_h5py, write_granule

N_GRANULES = 24


def _entries(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.iterdir()) if dest.exists() else []


def test_sigkill_mid_batch_then_rerun_completes(tmp_path: Path) -> None:
    src = tmp_path / "in"
    for i in range(N_GRANULES):
        write_granule(src / f"G{i:02d}.h5", seed=i, n=20_000)
    dest = tmp_path / "out"
    # one worker and checksums (reads every chunk) keep the batch busy long enough to kill it
    cmd = h5sidecar_command("index", str(src), "-o", str(dest), "--workers", "1", "--checksums")
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=err)
    try:
        deadline = time.monotonic() + 120
        while not any(n.endswith(".parq") for n in _entries(dest)):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI, the fork server and the workers
        proc.wait()
    killed = _entries(dest)
    done = [n for n in killed if n.endswith(".h5.parq")]
    assert "_report.json" not in killed  # a local DEST's report is its record
    assert 0 < len(done) < N_GRANULES
    for name in done:  # whatever is visible is a complete sidecar
        refs = read_refs(str(dest / name))
        assert refs.source.url == str(src / name[: -len(".parq")])
    res = subprocess.run(h5sidecar_command("index", str(src), "-o", str(dest), "--workers", "2",
                                           "--json"),
                         capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["counts"]["up_to_date"] >= len(done)  # not redone
    report = read_report(str(dest))
    assert report.complete and len(report.granules) == N_GRANULES
    assert report.counts["failed"] == 0
    # nothing else left behind: exactly one sidecar per granule, the record and DEST's lock
    assert _entries(dest) == sorted([f"G{i:02d}.h5.parq" for i in range(N_GRANULES)]
                                    + ["_h5sidecar.sqlite", "_h5sidecar.lock"])
    for i in (0, N_GRANULES - 1):
        assert_matches_h5py(str(dest / f"G{i:02d}.h5.parq"), src / f"G{i:02d}.h5")


def test_ctrl_c_writes_an_incomplete_report(tmp_path: Path) -> None:
    src = tmp_path / "in"
    for i in range(12):
        write_granule(src / f"G{i:02d}.h5", seed=i, n=20_000)
    dest = tmp_path / "out"
    cmd = h5sidecar_command("index", str(src), "-o", str(dest), "--workers", "1", "--checksums")
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(n.endswith(".parq") for n in _entries(dest)):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    report = read_report(str(dest))
    assert not report.complete and not report.ok
    assert len(report.granules) < 12 and all(g.status == "ok" for g in report.granules)
    for g in report.granules:  # what the report lists as done is there, complete
        assert read_refs(g.sidecar).source.url == g.url
    assert not [n for n in _entries(dest) if n.endswith((".tmp", ".old"))]


class _CutShort(ThreadPoolExecutor):
    """Runs no task: each one stops as Ctrl-C stops a worker in the middle of writing its
    sidecar, leaving the write's staging folder behind (when its process is killed before
    its own clean-up runs).  Every task but the first gets there only ``late`` seconds after
    it starts, so it is still queued or running when the run stops on the first."""

    def __init__(self, workers: int, late: float = 0.3) -> None:
        super().__init__(workers)
        self._late = late
        self._n = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        late = self._late if self._n else 0.0
        self._n += 1

        def cut(url: str, sidecar: str, *rest: Any) -> Any:
            time.sleep(late)
            folder, name = os.path.split(sidecar)
            os.makedirs(os.path.join(folder, f".{name}.x1y2z3.tmp"))
            raise KeyboardInterrupt

        return super().submit(cut, *args)


def test_an_interrupted_run_removes_what_its_writes_in_flight_left(tmp_path: Path) -> None:
    """The run's own end removes the staging folders of the granules it had in flight (seen:
    a worker's child killed mid-write by its parent's Ctrl-C handling left one), also those of
    tasks that a caller's executor had queued or was still running when the run stopped: the
    run cancels the first and waits a little for the second before it removes them."""
    src = tmp_path / "in"
    for i in range(3):
        write_granule(src / f"G{i:02d}.h5", seed=i, n=2_000)
    dest = tmp_path / "out"
    with _CutShort(2) as pool, pytest.raises(KeyboardInterrupt):
        index_many(str(src), str(dest), format="parquet", executor=pool)
    assert not [n for n in _entries(dest) if n.endswith((".tmp", ".old"))], _entries(dest)
    assert not read_report(str(dest)).complete
