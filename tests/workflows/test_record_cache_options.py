"""``--record-cache DIR|off`` (and the functions' ``record_settings``): every command that reads
an object-store DEST's record (index, report, prune, catalog, cube, serve) keeps its cache where it
is told, over ``$H5SIDECAR_RECORD_CACHE``, or keeps none."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import h5py
import httpx
import pytest

from h5sidecar.cli import build_parser, main
from h5sidecar.cli._args import record_settings
from h5sidecar.settings import RecordSettings
from h5sidecar.workflows import index_many, read_report
from tests._cli_launch import h5sidecar_command
from tests.conftest import free_port
from tests.workflows.conftest import assert_matches_h5py, write_granule


def _granule(path: Path, seed: int) -> Path:
    """A small granule with a time range (a catalog item needs one)."""
    write_granule(path, seed=seed, n=1500)
    with h5py.File(path, "a") as f:
        f.attrs["time_coverage_start"] = "2020-01-01T00:00:00Z"
        f.attrs["time_coverage_end"] = "2020-01-01T01:00:00Z"
    return path


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.sqlite")) if folder.exists() else []


@pytest.mark.parametrize("command", ["index", "report", "prune", "catalog", "serve", "cube"])
def test_every_command_reading_a_record_takes_the_option(command: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H5SIDECAR_RECORD_CACHE", "/from/env")
    monkeypatch.setenv("H5SIDECAR_RECORD_CACHE_MAX_AGE_DAYS", "3")
    extra = {"index": ["SRC", "-o", "s3://b/d"], "catalog": ["s3://b/d", "-o", "stac"],
             "cube": ["s3://b/d", "-o", "c.parq"]}
    base = [command, *extra.get(command, ["s3://b/d"])]
    assert record_settings(build_parser().parse_args(base)) == RecordSettings("/from/env", 3.0)
    given = build_parser().parse_args([*base, "--record-cache", "/given"])
    assert record_settings(given) == RecordSettings("/given", 3.0)
    off = record_settings(build_parser().parse_args([*base, "--record-cache", "off"]))
    assert off.cache_folder() is None


def test_the_commands_keep_the_cache_where_they_are_told(
        tmp_path: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    env_folder = tmp_path / "env"
    monkeypatch.setenv("H5SIDECAR_RECORD_CACHE", str(env_folder))  # what the options override
    local = _granule(tmp_path / "G0.h5", 0)
    s3.put(str(local), f"{s3_bucket}/in/G0.h5")
    dest = f"s3://{s3_bucket}/out"
    so = [arg for k in ("endpoint_url", "key", "secret", "token")
          for arg in ("--storage-option", f"{k}={s3_storage_options[k]}")]  # fmt: skip
    a, b = tmp_path / "a", tmp_path / "b"

    assert main(["index", f"s3://{s3_bucket}/in", "-o", dest, "--serial",
                 "--record-cache", str(a), *so]) == 0  # fmt: skip
    assert len(_files(a)) == 1
    capsys.readouterr()
    assert main(["report", dest, "--json", "--record-cache", str(a), *so]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(g["name"], g["status"]) for g in doc["granules"]] == [("G0.h5", "ok")]
    assert main(["prune", dest, "--record-cache", str(b), *so]) == 0
    assert _files(b) == _files(a)  # one file per DEST, named alike in any folder
    assert main(["catalog", dest, "-o", str(tmp_path / "stac"), "--record-cache", "off",
                 *so]) == 0  # fmt: skip
    assert "1 item(s)" in capsys.readouterr().out
    assert not env_folder.exists()  # no command used $H5SIDECAR_RECORD_CACHE
    assert_matches_h5py(read_report(dest, storage_options=s3_storage_options,
                                    record_settings=RecordSettings(str(a))).granules[0].sidecar,
                        local, s3_storage_options, remote_protocol="s3")  # fmt: skip

    # from Python: the functions' record_settings
    c = tmp_path / "c"
    s3.put(str(_granule(tmp_path / "G1.h5", 1)), f"{s3_bucket}/in/G1.h5")
    assert index_many(f"s3://{s3_bucket}/in", dest, storage_options=s3_storage_options,
                      executor="serial", record_settings=RecordSettings(str(c))).ok
    assert len(_files(c)) == 1 and not env_folder.exists()

    # serve: the gateway's cache in the folder given, none under $H5SIDECAR_RECORD_CACHE
    d = tmp_path / "d"
    port = free_port()
    proc = subprocess.Popen(h5sidecar_command("serve", dest, "--port", str(port),
                                              "--record-cache", str(d), *so),
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/granules", timeout=10)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["granules"] == ["G0.h5", "G1.h5"]
        assert len(_files(d)) == 1 and not env_folder.exists()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
