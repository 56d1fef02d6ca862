"""``h5sidecar prune``: orphaned sidecars, the other format, staging leftovers; the run report
lists orphans; nothing is removed without ``--apply``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from h5sidecar.cli import main
from h5sidecar.workflows import index_many, prune, read_report
from tests.workflows.conftest import assert_matches_h5py, write_granule


def _index(src: Path, dest: Path, fmt: str = "json"):  # type: ignore[no-untyped-def]
    report = index_many(str(src), str(dest), format=fmt, executor="serial")
    assert report.ok
    return report


def test_deleted_source_is_reported_and_pruned(granule_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "dest"
    _index(granule_dir, dest)
    gone = granule_dir / "G1.h5"
    gone.unlink()
    capsys.readouterr()
    assert main(["index", str(granule_dir), "-o", str(dest), "--format", "json", "--serial"]) == 0
    out = capsys.readouterr().out
    assert "1 sidecar(s) orphaned" in out and "G1.h5" in out and "h5sidecar prune" in out
    report = read_report(str(dest))
    assert report.orphaned == ("G1.h5",)
    assert main(["report", str(dest), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["orphaned"] == ["G1.h5"]

    dry = prune(str(dest))
    assert [(e.reason, e.name, e.removed) for e in dry.entries] == [("orphaned", "G1.h5", False)]
    assert str(gone) in dry.entries[0].detail
    assert (dest / "G1.h5.json").exists()  # a dry run removes nothing

    assert main(["prune", str(dest), "--apply"]) == 0
    assert "removed orphaned" in capsys.readouterr().out
    assert not (dest / "G1.h5.json").exists()
    report = read_report(str(dest))
    assert sorted(g.name for g in report.granules) == ["G0.h5", "G2.h5"]
    assert report.orphaned == ()
    for name in ("G0.h5", "G2.h5"):  # the others still read what h5py reads
        assert_matches_h5py(str(dest / f"{name}.json"), granule_dir / name)
    assert prune(str(dest)).entries == ()


def test_a_narrower_run_orphans_nothing(granule_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _index(granule_dir, dest)
    # one file indexed on its own: the other granules were not reached, not deleted
    index_many(str(granule_dir / "G0.h5"), str(dest), format="json", executor="serial")
    assert read_report(str(dest)).orphaned == ()
    assert prune(str(dest)).entries == ()


def test_switched_format_leaves_the_other_one(granule_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "dest"
    _index(granule_dir, dest, "json")
    _index(granule_dir, dest, "parquet")
    found = prune(str(dest))
    assert sorted((e.reason, e.name) for e in found.entries) == [
        ("other_format", f"G{i}.h5") for i in range(3)]
    assert all(e.path.endswith(".json") for e in found.entries)
    assert main(["prune", str(dest), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["applied"] is False and len(doc["entries"]) == 3
    prune(str(dest), apply=True)
    assert not list(dest.glob("G*.json")) and len(list(dest.glob("*.parq"))) == 3
    for i in range(3):
        assert_matches_h5py(str(dest / f"G{i}.h5.parq"), granule_dir / f"G{i}.h5")


def test_only_old_staging_leftovers(granule_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    _index(granule_dir, dest, "parquet")
    old_file = dest / ".G0.h5.json.abc123.tmp"
    old_file.write_bytes(b"{")
    old_dir = dest / ".G1.h5.parq.def456.tmp"
    (old_dir / "x").mkdir(parents=True)
    (old_dir / "x" / "refs.0.parq").write_bytes(b"PAR1")
    young = dest / ".G2.h5.json.fff.tmp"
    young.write_bytes(b"{")
    hour_ago = time.time() - 7200
    for p in (old_file, old_dir):
        os.utime(p, (hour_ago, hour_ago))
    found = prune(str(dest), reasons=("staging",))
    assert sorted(Path(e.path).name for e in found.entries) == sorted([old_file.name, old_dir.name])
    prune(str(dest), apply=True)
    assert not old_file.exists() and not old_dir.exists() and young.exists()
    assert len(list(dest.glob("*.parq"))) == 3


def test_s3_orphan_is_pruned(tmp_path: Path, s3, s3_bucket: str,  # type: ignore[no-untyped-def]
                            s3_storage_options) -> None:
    for i in range(2):
        path = write_granule(tmp_path / f"G{i}.h5", seed=i)
        s3.put(str(path), f"{s3_bucket}/in/G{i}.h5")
    source, dest = f"s3://{s3_bucket}/in", f"s3://{s3_bucket}/out"
    assert index_many(source, dest, storage_options=s3_storage_options, executor="serial",
                      format="json").ok
    s3.rm(f"{s3_bucket}/in/G0.h5")
    found = prune(dest, storage_options=s3_storage_options)
    assert [(e.reason, e.name) for e in found.entries] == [("orphaned", "G0.h5")]
    prune(dest, apply=True, storage_options=s3_storage_options)
    s3.invalidate_cache()
    assert not s3.exists(f"{s3_bucket}/out/G0.h5.json")
    assert s3.exists(f"{s3_bucket}/out/G1.h5.json")
    assert [g.name for g in read_report(dest, storage_options=s3_storage_options).granules] == [
        "G1.h5"]
    assert_matches_h5py(f"{dest}/G1.h5.json", tmp_path / "G1.h5",
                        storage_options=s3_storage_options, remote_protocol="s3")


def test_missing_dest_is_an_input_error(tmp_path: Path) -> None:
    assert main(["prune", str(tmp_path / "nowhere")]) == 2
