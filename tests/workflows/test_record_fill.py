"""The record cache's first fill (moto S3): a bulk load into a private file, linked into place
only once complete, holding what loading the same parts one refresh at a time holds."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from h5sidecar.dest import _record_cache, _record_store
from h5sidecar.settings import RecordSettings
from h5sidecar.workflows import read_report
from tests.workflows.test_record_parts import _history

PARTS = "_h5sidecar_record"
#: What a cache holds, row by row (``updated`` is the load's clock).
_TABLES = {
    "granules": "SELECT url, name, sidecar, status, source, n_virtual, n_inlined, n_skipped, "
                "skipped, n_chunks, sidecar_bytes, seconds, error, run, stamp, key, run_uid "
                "FROM granules ORDER BY url",
    "gone": "SELECT * FROM gone ORDER BY url",
    "headers": "SELECT * FROM headers ORDER BY uid",
    "runs": "SELECT * FROM runs ORDER BY id",
    "roots": "SELECT * FROM roots ORDER BY seq",
    "parts": "SELECT * FROM parts ORDER BY name",
    "indexes": "SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name",
}


def _dump(path: str) -> dict[str, list[tuple[Any, ...]]]:
    db = sqlite3.connect(path)
    try:
        return {table: db.execute(sql).fetchall() for table, sql in _TABLES.items()}
    finally:
        db.close()


def test_a_first_fill_holds_what_refreshes_load(tmp_path: Path, s3, s3_bucket: str,
                                                s3_storage_options) -> None:  # fmt: skip
    dest = f"s3://{s3_bucket}/out"
    # failed rows overwritten, a tombstone, a granule failed then ok again: four parts
    base = _history(40, s3_bucket, dest, s3_storage_options)
    fs, root = _record_store.store_of(dest, s3_storage_options)
    filled = _record_store.cached_record(fs, root, RecordSettings(record_cache=str(tmp_path / "a")))
    assert filled is not None
    # the same parts loaded by a refresh into an empty cache (what every later run does)
    path = str(tmp_path / "b" / "cache.sqlite")
    db = _record_cache.open_cache(path)
    try:
        assert _record_cache.refresh(db, fs, root, path) == 4
    finally:
        db.close()
    got, want = _dump(filled), _dump(path)
    assert got == want
    assert len(got["granules"]) == len(base.granules) - 1 and len(got["gone"]) == 1
    assert {i for i, _ in got["indexes"]} >= {"granules_by_name", "granules_by_sidecar"}
    db = sqlite3.connect(filled)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        db.close()


def test_a_first_fill_that_fails_leaves_no_cache_behind(
        tmp_path: Path, s3, s3_bucket: str, s3_storage_options) -> None:
    dest = f"s3://{s3_bucket}/out"
    base = _history(5, s3_bucket, dest, s3_storage_options)
    fs, root = _record_store.store_of(dest, s3_storage_options)
    # a part that cannot be read, after the good ones: the fill fails past its first parts
    s3.pipe(f"{s3_bucket}/out/{PARTS}/part-99999999999999999999-x.parquet", b"not parquet")
    settings = RecordSettings(record_cache=str(tmp_path / "cache"))
    path = _record_cache.cache_file(fs, root, settings)
    assert path is not None
    with pytest.raises(Exception, match=r"(?i)parquet"):
        _record_store.cached_record(fs, root, settings)
    # no cache file (a half-loaded one would be taken for a filled one), no leftovers
    assert os.listdir(tmp_path / "cache") == []
    s3.rm(f"{s3_bucket}/out/{PARTS}/part-99999999999999999999-x.parquet")
    assert _record_store.cached_record(fs, root, settings) == path
    report = read_report(dest, storage_options=s3_storage_options, record_settings=settings)
    assert len(report.granules) == len(base.granules) - 1
