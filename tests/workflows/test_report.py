"""Run-report records: JSON round trip, the record of a local DEST, malformed reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from h5sidecar.dest._report import error_record
from h5sidecar.errors import InvalidReferenceError, NotHDF5Error
from h5sidecar.workflows import GranuleResult, RunReport, read_report, write_report


def _report() -> RunReport:
    ok = GranuleResult(
        url="/d/a.h5", sidecar="/o/a.h5.parq", status="ok", name="a.h5",
        source={"url": "/d/a.h5", "size": 10, "etag": None, "mtime": 1.5},
        n_virtual=3, n_inlined=1, n_skipped=1,
        skipped=({"path": "x", "kind": "unsupported_dtype", "reason": "opaque"},),
        n_chunks=7, sidecar_bytes=1234, seconds={"index": 0.25, "total": 0.5},
    )
    bad = GranuleResult(url="/d/b.h5", sidecar="/o/b.h5.parq", status="failed", name="b.h5",
                        error=error_record(NotHDF5Error("no HDF5 signature")))
    return RunReport(source="/d", dest="/o", format="parquet", options={"force": False},
                     started="2026-01-01T00:00:00+00:00", finished="2026-01-01T00:00:01+00:00",
                     seconds=1.0, granules=(ok, bad), version="0.1.0")


def test_round_trip_and_counts() -> None:
    report = _report()
    doc = json.loads(json.dumps(report.to_dict()))
    assert doc["counts"] == {"ok": 1, "failed": 1, "up_to_date": 0}
    assert doc["granules"][1]["error"]["kind"] == "not_hdf5"
    assert "re-stage" in doc["granules"][1]["error"]["hint"]
    assert RunReport.from_dict(doc) == report
    assert not report.ok and [g.name for g in report.failed] == ["b.h5"]


def test_error_kinds_and_hints() -> None:
    assert error_record(PermissionError("denied")).kind == "os_error"
    rec = error_record(RuntimeError("boom"), kind="bug")
    assert rec.kind == "bug" and rec.type == "RuntimeError" and "report" in rec.hint


def test_write_goes_to_the_record_of_a_local_dest(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    url = write_report(_report(), str(dest))
    assert url == str(dest / "_h5sidecar.sqlite")
    assert sorted(p.name for p in dest.iterdir()) == ["_h5sidecar.sqlite"]  # nothing else left
    assert read_report(str(dest)) == _report()


def test_a_malformed_json_report_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "_report.json").write_text("{not json")
    with pytest.raises(InvalidReferenceError, match="delete it"):
        read_report(str(dest))


def test_an_unreadable_record_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "_h5sidecar.sqlite").write_bytes(b"not a database, " * 100)
    with pytest.raises(InvalidReferenceError, match="unreadable"):
        read_report(str(dest))


def test_report_on_s3(s3, s3_bucket: str, s3_storage_options) -> None:
    url = write_report(_report(), f"s3://{s3_bucket}/out", storage_options=s3_storage_options)
    # one part of the record in parts, not a whole report
    assert url.startswith(f"s3://{s3_bucket}/out/_h5sidecar_record/part-")
    assert url.endswith(".parquet") and not s3.exists(f"{s3_bucket}/out/_report.json")
    assert read_report(f"s3://{s3_bucket}/out", storage_options=s3_storage_options) == _report()
