"""Run reports never shrink: each run's report is merged into the one already in DEST, and the
gateway's allow-list comes from the merged report, so an interrupted run cannot lock out the
good sidecars it did not reach."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import httpx
import numpy as np

from h5sidecar.dest._report import RunReport
from h5sidecar.dest._report_io import merge_reports
from h5sidecar.gateway._dest import DestIndex
from h5sidecar.workflows import index_many, read_report, write_report
from tests.gateway._http import gateway
from tests.workflows.conftest import write_granule


def _three(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "src"
    for i in range(3):
        write_granule(src / f"G{i}.h5", seed=i)
    out = tmp_path / "out"
    assert index_many(str(src), str(out), format="json", executor="serial").ok
    return src, out


def _interrupted(out: Path, src: Path) -> RunReport:
    """What an `index --force` interrupted before its first granule writes."""
    return RunReport(source=str(src), dest=str(out), format="json", options={"force": True},
                     started="2026-01-01T00:00:00+00:00", finished="2026-01-01T00:00:01+00:00",
                     seconds=1.0, granules=(), complete=False)  # fmt: skip


def test_a_narrower_run_keeps_the_other_entries(tmp_path: Path) -> None:
    src, out = _three(tmp_path)
    write_granule(src / "G1.h5", seed=7)  # changed: the second run re-indexes only it
    again = index_many(str(src / "G1.h5"), str(out), format="json", executor="serial")
    assert [g.name for g in again.granules] == ["G1.h5"]  # this run's own results
    on_disk = read_report(str(out))
    assert sorted(Path(g.url).name for g in on_disk.granules) == ["G0.h5", "G1.h5", "G2.h5"]
    assert on_disk.carried_over == 2
    assert on_disk.counts == {"ok": 3, "failed": 0, "up_to_date": 0}
    assert str(src) in on_disk.roots


def test_an_interrupted_run_keeps_every_entry(tmp_path: Path) -> None:
    src, out = _three(tmp_path)
    write_report(_interrupted(out, src), str(out))
    doc = read_report(str(out))
    assert doc.complete is False
    assert len(doc.granules) == 3 and doc.carried_over == 3


def test_new_entry_wins_over_the_old_one() -> None:
    old = RunReport("s", "d", "json", {}, "a", "b", 1.0, ())
    from h5sidecar.dest._report import GranuleResult

    g_ok = GranuleResult(url="/s/a.h5", sidecar="/d/a.h5.json", status="ok", name="a.h5")
    g_failed = GranuleResult(url="/s/a.h5", sidecar="/d/a.h5.json", status="failed", name="a.h5")
    merged = merge_reports(merge_reports(None, RunReport(**{**_fields(old), "granules": (g_ok,)})),
                           RunReport(**{**_fields(old), "granules": (g_failed,)}))  # fmt: skip
    assert [g.status for g in merged.granules] == ["failed"] and merged.carried_over == 0


def _fields(r: RunReport) -> dict:
    return {f: getattr(r, f) for f in r.__dataclass_fields__}


def test_gateway_still_serves_after_an_interrupted_force_run(tmp_path: Path) -> None:
    src, out = _three(tmp_path)
    write_report(_interrupted(out, src), str(out))
    snap = DestIndex(str(out)).snapshot()
    assert str(src) in snap.sources
    with gateway(str(out)) as (url, _app):
        r = httpx.get(f"{url}/zarr/G2.h5/gt1l/heights/quality/0", timeout=30)
        assert r.status_code == 200, r.text
        with h5py.File(src / "G2.h5") as f:
            np.testing.assert_array_equal(np.frombuffer(r.content, "i1"),
                                          f["gt1l/heights/quality"][:1000])  # fmt: skip


def test_an_old_report_without_roots_allows_its_source_root(tmp_path: Path) -> None:
    src, out = _three(tmp_path)
    doc = read_report(str(out)).to_dict()
    (out / "_h5sidecar.sqlite").unlink()  # a DEST of a version before the record
    doc.pop("roots")
    doc["granules"] = []  # what an interrupted run of an older version left
    (out / "_report.json").write_text(json.dumps(doc))
    assert str(src) in DestIndex(str(out)).snapshot().sources
