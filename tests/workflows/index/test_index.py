"""Batch indexing of local folders: sidecars equal h5py, report, resume, change detection,
bad granules among good ones."""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from h5sidecar.errors import SourceNotFoundError
from h5sidecar.references import read_refs
from h5sidecar.workflows import index_many, index_one, read_report
from h5sidecar.workflows.index._index_one import IndexOptions
from tests.workflows.conftest import assert_matches_h5py, write_bad_granules, write_granule


@pytest.mark.parametrize(("fmt", "executor"), [("parquet", "process"), ("json", "serial")])
def test_index_folder_values_equal_h5py(granule_dir: Path, tmp_path: Path, fmt: str,
                                        executor: str) -> None:
    dest = tmp_path / "sidecars"
    report = index_many(str(granule_dir), str(dest), format=fmt, executor=executor, workers=2)
    assert report.ok and report.complete
    assert report.counts == {"ok": 3, "failed": 0, "up_to_date": 0}
    suffix = ".parq" if fmt == "parquet" else ".json"
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        [f"G{i}.h5{suffix}" for i in range(3)] + ["_h5sidecar.sqlite", "_h5sidecar.lock"])
    for g in report.granules:
        src = granule_dir / g.name
        assert g.url == str(src) and g.sidecar == str(dest / (g.name + suffix))
        assert_matches_h5py(g.sidecar, src)
        refs = read_refs(g.sidecar)
        st = src.stat()
        assert refs.source.url == str(src) and refs.source.size == st.st_size
        # report counts are the sidecar's, and the recorded identity is the source's
        assert g.source == refs.source.to_dict()
        assert g.n_virtual + g.n_inlined == len(refs.arrays) == 6
        assert g.n_chunks == sum(a.manifest.n_stored + a.manifest.n_inline
                                 for a in refs.arrays.values())
        assert g.sidecar_bytes > 0 and g.seconds["total"] >= g.seconds["index"] > 0
    # the record holds the report (a local DEST writes no _report.json)
    assert read_report(str(dest)) == report


def test_resume_change_detection_and_force(granule_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "sidecars"
    first = index_many(str(granule_dir), str(dest), executor="serial")
    assert first.counts["ok"] == 3
    # what a write killed mid-way leaves beside a sidecar is cleaned up by the next run
    leftover = dest / ".G0.h5.parq.k1ll3d_x.tmp"
    (leftover / "gt1l").mkdir(parents=True)
    (leftover / "gt1l" / "refs.0.parq").write_bytes(b"partial")
    again = index_many(str(granule_dir), str(dest), executor="serial")
    assert again.counts == {"ok": 0, "failed": 0, "up_to_date": 3}
    assert {g.name: g.source for g in again.granules} == {g.name: g.source for g in first.granules}
    assert not leftover.exists()
    assert {g.name: g.n_chunks for g in again.granules} == {
        g.name: g.n_chunks for g in first.granules}
    assert {g.name: (g.n_virtual, g.n_inlined, g.n_skipped) for g in again.granules} == {
        g.name: (g.n_virtual, g.n_inlined, g.n_skipped) for g in first.granules}
    # replace one source with different content: only it is re-indexed, and reads the new values
    changed = granule_dir / "G1.h5"
    write_granule(changed, seed=42, n=3000)
    third = index_many(str(granule_dir), str(dest), executor="serial")
    status = {g.name: g.status for g in third.granules}
    assert status == {"G0.h5": "up_to_date", "G1.h5": "ok", "G2.h5": "up_to_date"}
    assert_matches_h5py(str(dest / "G1.h5.parq"), changed)
    assert read_refs(str(dest / "G1.h5.parq")).source.size == changed.stat().st_size
    # same size, new mtime (touched): still detected
    os.utime(granule_dir / "G2.h5", (1_000_000_000, 1_000_000_000))
    fourth = index_many(str(granule_dir), str(dest), executor="serial")
    assert {g.name: g.status for g in fourth.granules}["G2.h5"] == "ok"
    forced = index_many(str(granule_dir), str(dest), executor="serial", force=True)
    assert forced.counts["ok"] == 3


class CountingExecutor(ThreadPoolExecutor):
    """A caller's executor that counts the tasks it was given."""

    def __init__(self) -> None:
        super().__init__(2)
        self.submitted: list[str] = []

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        self.submitted.append(args[0])
        return super().submit(fn, *args, **kwargs)


def test_up_to_date_granules_are_never_dispatched(granule_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "sidecars"
    with CountingExecutor() as ex:
        assert index_many(str(granule_dir), str(dest), executor=ex).counts["ok"] == 3
        assert len(ex.submitted) == 3
    write_granule(granule_dir / "G2.h5", seed=5)
    with CountingExecutor() as ex:
        report = index_many(str(granule_dir), str(dest), executor=ex)
        # checked in the calling process: only the changed granule reached the executor
        assert ex.submitted == [str(granule_dir / "G2.h5")]
    assert report.counts == {"ok": 1, "failed": 0, "up_to_date": 2}


class ExplodingExecutor(ThreadPoolExecutor):
    """A caller's executor on which every task raises (a bug, as far as the batch can tell)."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def, override]
        def boom(*_: object) -> None:
            raise RuntimeError("simulated bug")

        return super().submit(boom, *args)


def test_a_raising_task_is_recorded_not_raised(granule_dir: Path, tmp_path: Path) -> None:
    with ExplodingExecutor(1) as ex:
        report = index_many(str(granule_dir), str(tmp_path / "out"), executor=ex)
    assert report.counts == {"ok": 0, "failed": 3, "up_to_date": 0}
    for g in report.granules:
        assert g.error is not None and g.error.kind == "bug" and "simulated" in g.error.message
        assert g.source is not None and g.source["size"] == (granule_dir / g.name).stat().st_size
    assert read_report(str(tmp_path / "out")).counts["failed"] == 3


def test_unreadable_sidecar_is_rewritten(granule_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "sidecars"
    index_many(str(granule_dir), str(dest), format="json", executor="serial")
    (dest / "G0.h5.json").write_text("{broken")
    report = index_many(str(granule_dir), str(dest), format="json", executor="serial")
    assert {g.name: g.status for g in report.granules}["G0.h5"] == "ok"
    assert_matches_h5py(str(dest / "G0.h5.json"), granule_dir / "G0.h5")


def test_sidecars_without_identity_are_rewritten(granule_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "sidecars"
    index_many(str(granule_dir), str(dest), executor="serial")
    # an uncommitted Parquet directory (no .zmetadata: an interrupted object-store write) and
    # a kerchunk sidecar without h5sidecar's extras carry no identity to trust
    (dest / "G0.h5.parq" / ".zmetadata").unlink()
    zmeta = json.loads((dest / "G1.h5.parq" / ".zmetadata").read_text())
    del zmeta["h5sidecar"]
    (dest / "G1.h5.parq" / ".zmetadata").write_text(json.dumps(zmeta))
    report = index_many(str(granule_dir), str(dest), executor="serial")
    status = {g.name: g.status for g in report.granules}
    assert status == {"G0.h5": "ok", "G1.h5": "ok", "G2.h5": "up_to_date"}
    for name in ("G0.h5", "G1.h5"):
        assert_matches_h5py(str(dest / f"{name}.parq"), granule_dir / name)


def test_bad_granules_fail_alone(granule_dir: Path, tmp_path: Path) -> None:
    bad = write_bad_granules(granule_dir, granule_dir / "G0.h5")
    dest = tmp_path / "sidecars"
    report = index_many(str(granule_dir), str(dest), workers=2)
    assert not report.ok
    by_name = {g.name: g for g in report.granules}
    assert len(by_name) == 6
    for name in ("G0.h5", "G1.h5", "G2.h5"):
        assert by_name[name].status == "ok"
        assert_matches_h5py(by_name[name].sidecar, granule_dir / name)
    for path in bad.values():
        g = by_name[path.name]
        assert g.status == "failed" and g.error is not None
        assert g.error.kind == "not_hdf5", (path.name, g.error)
        assert g.error.message and g.error.hint
        assert g.source is not None and g.source["size"] == path.stat().st_size
        assert not os.path.exists(g.sidecar)
    # the report on disk lists them too, and a re-run retries only the failed ones
    on_disk = read_report(str(dest))
    assert on_disk.counts == {"ok": 3, "failed": 3, "up_to_date": 0}
    rerun = index_many(str(granule_dir), str(dest), executor="serial")
    assert rerun.counts == {"ok": 0, "failed": 3, "up_to_date": 3}


def test_single_file_source_gets_a_report(tmp_path: Path) -> None:
    src = write_granule(tmp_path / "one" / "single.h5")
    dest = tmp_path / "out"
    report = index_many(str(src), str(dest), executor="serial")
    assert [g.name for g in report.granules] == ["single.h5"]
    assert (dest / "single.h5.parq").is_dir() and (dest / "_h5sidecar.sqlite").is_file()
    assert_matches_h5py(str(dest / "single.h5.parq"), src)


def test_missing_source_raises(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError):
        index_many(str(tmp_path / "none"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_index_one_is_a_plain_task(granule_dir: Path, tmp_path: Path) -> None:
    src = str(granule_dir / "G0.h5")
    dest = str(tmp_path / "G0.h5.json")
    res = index_one(src, dest, IndexOptions(format="json"))
    assert res.status == "ok" and res.error is None
    assert index_one(src, dest, IndexOptions(format="json")).status == "up_to_date"
    assert index_one(src, dest, IndexOptions(format="json", force=True)).status == "ok"
    missing = index_one(str(granule_dir / "gone.h5"), dest + "2", IndexOptions())
    assert missing.status == "failed" and missing.error is not None
    assert missing.error.hint


def test_unsupported_raise_fails_the_granule(tmp_path: Path) -> None:
    import h5py
    import numpy as np

    src = tmp_path / "in" / "odd.h5"
    src.parent.mkdir()
    with h5py.File(src, "w") as f:
        f["ok"] = np.arange(10)
        ragged = f.create_dataset("ragged", (2,), dtype=h5py.vlen_dtype(np.int32))
        ragged[0], ragged[1] = [1, 2], [3]  # variable-length sequences: no Zarr dtype
    skip = index_many(str(src), str(tmp_path / "a"), executor="serial")
    assert skip.ok
    g = skip.granules[0]
    assert g.n_skipped == 1 and g.skipped[0]["path"] == "ragged" and g.skipped[0]["reason"]
    assert g.n_virtual + g.n_inlined == 1
    raised = index_many(str(src), str(tmp_path / "b"), executor="serial",
                        on_unsupported="raise")
    assert not raised.ok and raised.granules[0].error.kind == "unsupported"
    shutil.rmtree(tmp_path / "b")
