"""A re-run compares its listing with DEST's record in SQL: granules the record shows current
are decided without a row-by-row check; whatever the SQL cannot be sure of (another identity,
other content settings, a sidecar changed since, an identity without nanosecond times) is
checked as before and decided as before."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from h5sidecar.workflows import index_many
from h5sidecar.workflows.index import _up_to_date
from tests.workflows.conftest import assert_matches_h5py, write_granule

RECORD = "_h5sidecar.sqlite"


@pytest.fixture
def row_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The granules a run decides row by row in Python (``from_record``)."""
    seen: list[str] = []
    real = _up_to_date.from_record

    def counting(row, *args, **kw):  # type: ignore[no-untyped-def]
        seen.append(row.url)
        return real(row, *args, **kw)

    monkeypatch.setattr(_up_to_date, "from_record", counting)
    return seen


def _index(src: Path, dest: Path, fmt: str = "json", **kw: object):  # type: ignore[no-untyped-def]
    return index_many(str(src), str(dest), format=fmt, executor="serial", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_a_noop_rerun_decides_in_sql_not_row_by_row(
    tmp_path: Path, fmt: str, row_checks: list[str]
) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    files = [write_granule(src / sub / f"G{i}.h5", seed=i, n=2_000)
             for i, sub in enumerate(["", "", "a", "a/b"])]
    first = _index(src, dest, fmt)
    assert first.counts["ok"] == 4
    again = _index(src, dest, fmt)
    assert row_checks == []  # the join decided every granule
    assert again.counts == {"ok": 0, "failed": 0, "up_to_date": 4} and again.ok
    assert [(g.name, g.sidecar, g.n_chunks, g.sidecar_bytes, g.source) for g in again.granules] \
        == [(g.name, g.sidecar, g.n_chunks, g.sidecar_bytes, g.source) for g in first.granules]
    for g, f in zip(again.granules, sorted(files, key=lambda p: str(p.relative_to(src))),
                    strict=True):
        assert_matches_h5py(g.sidecar, f)


def test_what_sql_cannot_be_sure_of_is_checked_as_before(
    tmp_path: Path, row_checks: list[str]
) -> None:
    src, dest = tmp_path / "in", tmp_path / "out"
    files = [write_granule(src / f"G{i}.h5", seed=i, n=2_000) for i in range(4)]
    _index(src, dest)
    # G0 replaced by a file of the same size with its mtime set back (a new inode and ctime)
    st = files[0].stat()
    write_granule(tmp_path / "new.h5", seed=0, n=2_000)  # same bytes, another file
    os.replace(tmp_path / "new.h5", files[0])
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert files[0].stat().st_size == st.st_size
    # G1's sidecar rewritten since it was recorded (its stamp no longer matches)
    sidecar = dest / "G1.h5.json"
    sidecar.write_text(sidecar.read_text())
    os.utime(sidecar, ns=(1, 1))
    # G2's row holds its identity without nanosecond times (as an imported report may)
    db = sqlite3.connect(dest / RECORD)
    with db:
        (source,) = db.execute("SELECT source FROM granules WHERE url = ?",
                               (str(files[2]),)).fetchone()
        doc = json.loads(source)
        for key in ("mtime_ns", "inode", "ctime_ns", "device"):
            doc.pop(key, None)
        db.execute("UPDATE granules SET source = ? WHERE url = ?",
                   (json.dumps(doc), str(files[2])))
    db.close()

    again = _index(src, dest)
    status = {g.name: g.status for g in again.granules}
    # G1: its sidecar still records its source's identity, as its extras block says
    assert status == {"G0.h5": "ok", "G1.h5": "up_to_date", "G2.h5": "up_to_date",
                      "G3.h5": "up_to_date"}
    assert sorted(row_checks) == sorted(str(f) for f in files[:3])  # not G3: decided in SQL
    for g in again.granules:
        assert_matches_h5py(g.sidecar, src / g.name)

    # other content settings: every granule re-indexed, none decided in SQL
    row_checks.clear()
    third = _index(src, dest, checksums=True)
    assert third.counts["ok"] == 4 and len(row_checks) == 4
