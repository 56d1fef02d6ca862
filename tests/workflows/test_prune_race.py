"""``prune --apply`` and ``index`` cannot destroy each other's work (issue 28, item 5).

An ``index`` switching ``--format`` writes its new sidecars first and its report last; a
``prune --apply`` in between read the old report, took the fresh ``.parq`` sidecars for "other
format" and removed them, while ``index`` said "ok".  Now index holds DEST's lock shared and
prune --apply exclusive (the second waits), and prune never removes a sidecar written after the
report it read.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from h5sidecar.dest._dest_lock import dest_lock
from h5sidecar.indexer import index_granule
from h5sidecar.references import write_refs
from h5sidecar.workflows import index_many, prune, read_report
from tests._cli_launch import h5sidecar_command
from tests.workflows.conftest import assert_matches_h5py, write_granule


def _granules(folder: Path, n: int) -> list[Path]:
    return [write_granule(folder / f"G{i:02d}.h5", seed=i, n=2000) for i in range(n)]


def test_prune_keeps_sidecars_written_after_the_report_it_read(tmp_path: Path) -> None:
    files = _granules(tmp_path / "in", 3)
    dest = tmp_path / "dest"
    assert index_many(str(tmp_path / "in"), str(dest), format="json", executor="serial").ok
    time.sleep(0.05)  # (mtimes of a coarse file system must tell the report from what follows)
    # what an index run switching to Parquet has written before its report names them
    for f in files:
        write_refs(index_granule(str(f)), str(dest / f"{f.name}.parq"), format="parquet")
    result = prune(str(dest), apply=True)
    assert {(e.reason, e.removed) for e in result.entries} == {("other_format", False)}
    assert all("written after the run report" in e.detail for e in result.entries)
    for f in files:
        assert_matches_h5py(str(dest / f"{f.name}.parq"), f)
        assert_matches_h5py(str(dest / f"{f.name}.json"), f)


def test_prune_apply_waits_for_a_running_index(tmp_path: Path) -> None:
    files = _granules(tmp_path / "in", 2)
    dest = tmp_path / "dest"
    assert index_many(str(tmp_path / "in"), str(dest), format="json", executor="serial").ok
    files[0].unlink()  # its sidecar is orphaned: prune --apply removes it
    with dest_lock(str(dest), exclusive=False, holder="index"):  # as a running index holds it
        proc = subprocess.Popen(h5sidecar_command("prune", str(dest), "--apply"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(5)  # long enough to start, find the lock taken and wait
        assert proc.poll() is None, proc.communicate()
        assert (dest / "G00.h5.json").exists()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "prune --apply waits for" in " ".join(err.split())  # (rich wraps long lines)
    assert "removed orphaned" in out and not (dest / "G00.h5.json").exists()
    assert_matches_h5py(str(dest / "G01.h5.json"), files[1])


def test_index_switching_format_survives_a_racing_prune(tmp_path: Path) -> None:
    """A real index process switches DEST to Parquet while this process prunes in a loop."""
    files = _granules(tmp_path / "in", 12)
    dest = tmp_path / "dest"
    assert index_many(str(tmp_path / "in"), str(dest), format="json", executor="serial").ok
    cmd = h5sidecar_command("index", str(tmp_path / "in"), "-o", str(dest), "--format",
                            "parquet", "--serial")  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    prunes = 0
    try:
        while proc.poll() is None:
            prune(str(dest), apply=True)
            prunes += 1
    finally:
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert prunes > 0
    prune(str(dest), apply=True)  # now the report names Parquet: the JSON sidecars go
    report = read_report(str(dest))
    assert {g.sidecar.rsplit(".", 1)[1] for g in report.granules} == {"parq"}
    for f in files:
        assert not (dest / f"{f.name}.json").exists()
        assert_matches_h5py(str(dest / f"{f.name}.parq"), f)


@pytest.mark.parametrize("exclusive", [False, True])
def test_the_lock_file_is_hidden_from_listings(tmp_path: Path, exclusive: bool) -> None:
    files = _granules(tmp_path / "in", 1)
    dest = tmp_path / "dest"
    with dest_lock(str(dest), exclusive=exclusive, holder="test"):
        pass
    assert (dest / "_h5sidecar.lock").exists()
    assert index_many(str(tmp_path / "in"), str(dest), format="json", executor="serial").ok
    assert prune(str(dest), apply=True).entries == ()
    assert_matches_h5py(str(dest / f"{files[0].name}.json"), files[0])
