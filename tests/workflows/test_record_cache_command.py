"""``h5sidecar cache list`` / ``cache prune``: what each record cache file is for (its DEST), its
size and last use, and removing those not used for some days."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from h5sidecar.cli import main
from h5sidecar.dest import _record_store
from h5sidecar.settings import RecordSettings
from h5sidecar.workflows import write_report
from tests.workflows.test_record_parts import _synthetic


def _cache(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["cache", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_cache_list_and_prune(tmp_path: Path, s3: Any, s3_bucket: str,
                              s3_storage_options: dict[str, Any],
                              monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "records"
    settings = RecordSettings(record_cache=str(folder))
    dests = [f"s3://{s3_bucket}/old", f"s3://{s3_bucket}/new"]
    paths = {}
    for dest in dests:
        write_report(_synthetic(50, s3_bucket), dest, storage_options=s3_storage_options,
                     record_settings=settings)  # fmt: skip
        fs, root = _record_store.store_of(dest, s3_storage_options)
        paths[dest] = _record_store.cached_record(fs, root, settings)
    # a file an earlier version made (no DEST recorded in it) is listed all the same
    unknown = folder / ("v1-" + "0" * 32 + ".sqlite")
    sqlite3.connect(unknown).close()
    stray = folder / "notes.txt"  # not a cache file: never listed nor removed
    stray.write_text("mine")
    day = 86_400
    os.utime(paths[dests[0]], (time.time() - 10 * day,) * 2)
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{paths[dests[0]]}{suffix}"):
            os.utime(f"{paths[dests[0]]}{suffix}", (time.time() - 10 * day,) * 2)
    os.utime(unknown, (time.time() - 40 * day,) * 2)

    listed = _cache(capsys, "list", "--record-cache", str(folder))
    assert listed["folder"] == str(folder)
    assert [(f["path"], f["dest"]) for f in listed["files"]] == [
        (paths[dests[1]], dests[1]), (paths[dests[0]], dests[0]), (str(unknown), None)]
    assert all(f["size"] > 0 for f in listed["files"][:2])
    assert time.time() - listed["files"][0]["last_used"] < 600

    # the default age: H5SIDECAR_RECORD_CACHE_MAX_AGE_DAYS; the folder: H5SIDECAR_RECORD_CACHE
    monkeypatch.setenv("H5SIDECAR_RECORD_CACHE", str(folder))
    monkeypatch.setenv("H5SIDECAR_RECORD_CACHE_MAX_AGE_DAYS", "30")
    assert [f["path"] for f in _cache(capsys, "prune")["files"]] == [str(unknown)]
    removed = _cache(capsys, "prune", "--older-than", "5")["files"]
    assert [(f["path"], f["dest"]) for f in removed] == [(paths[dests[0]], dests[0])]
    assert not any(os.path.exists(f"{paths[dests[0]]}{s}") for s in ("", "-wal", "-shm"))
    assert [f["dest"] for f in _cache(capsys, "list")["files"]] == [dests[1]]
    assert stray.read_text() == "mine"
    capsys.readouterr()
    assert main(["cache", "list"]) == 0
    assert dests[1] in capsys.readouterr().out

    # the DEST whose cache went is read again in full, its cache made anew
    fs, root = _record_store.store_of(dests[0], s3_storage_options)
    with _record_store.Mirror(fs, root, settings=settings) as mirror:
        assert mirror.cached and mirror.read == 1
    assert main(["cache", "list", "--record-cache", "off"]) == 2  # no folder to list
