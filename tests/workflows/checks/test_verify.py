"""verify_refs: passes on good sidecars; catches a corrupted source byte and a tampered sidecar."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import pytest

from h5sidecar.errors import SourceNotFoundError
from h5sidecar.workflows import index_many, verify_refs
from tests.workflows.conftest import write_granule


def _indexed(tmp_path: Path, *, fmt: str = "json", checksums: bool = False) -> tuple[Path, str]:
    src = write_granule(tmp_path / "in" / "a.h5")
    report = index_many(str(src), str(tmp_path / "out"), format=fmt, executor="serial",
                        checksums=checksums)
    assert report.ok
    return src, report.granules[0].sidecar


def _flip_byte_in_chunk(src: Path, dataset: str, chunk: int) -> None:
    """Change one byte inside a stored chunk, keeping the file's size and mtime."""
    with h5py.File(src, "r") as f:
        info = f[dataset].id.get_chunk_info(chunk)
    st = src.stat()
    with open(src, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        b = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([b[0] ^ 0xFF]))
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_good_sidecar_verifies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # fastparquet (fsspec's default Parquet-refs engine) is not a dependency: verify without it
    monkeypatch.setitem(sys.modules, "fastparquet", None)
    _, sidecar = _indexed(tmp_path, fmt="parquet", checksums=True)
    report = verify_refs(sidecar, sample=0)
    assert report.ok and not report.source_changed
    by = {v.path: v for v in report.variables}
    assert set(by) == {"gt1l/heights/h_ph", "gt1l/heights/delta_time", "gt1l/heights/quality",
                       "grid", "ancillary/scalar", "ancillary/label"}
    assert all(v.status == "ok" for v in by.values())
    assert by["grid"].chunks_checked == by["grid"].chunks_total == 9
    assert by["gt1l/heights/h_ph"].checksums_checked == 4
    sampled = verify_refs(sidecar, sample=2, seed=1)
    assert {v.path: v.chunks_checked for v in sampled.variables}["grid"] == 2
    assert sampled.ok


def test_corrupted_source_byte_is_caught_by_checksums(tmp_path: Path) -> None:
    src, sidecar = _indexed(tmp_path, checksums=True)
    # an uncompressed chunk: h5py and the sidecar read the same wrong values, only the
    # recorded checksum can tell
    _flip_byte_in_chunk(src, "gt1l/heights/quality", 2)
    report = verify_refs(sidecar, sample=0)
    # same size and mtime; the change time moved (rot on the disk would not move it: then
    # only the checksums tell, as they do here)
    assert report.source_changed
    assert not report.ok
    by = {v.path: v for v in report.variables}
    assert by["gt1l/heights/quality"].status == "different"
    assert by["gt1l/heights/quality"].checksums_failed == 1
    assert "checksum" in by["gt1l/heights/quality"].message
    assert by["grid"].status == "ok"


def test_modified_source_without_checksums_is_flagged(tmp_path: Path) -> None:
    src, sidecar = _indexed(tmp_path)
    _flip_byte_in_chunk(src, "gt1l/heights/h_ph", 1)
    os.utime(src, (1_000_000_000, 1_000_000_000))
    report = verify_refs(sidecar, sample=0)
    assert report.source_changed and not report.ok
    # the gzip stream of that chunk no longer decodes (h5py fails too): reported, not raised
    assert {v.path: v.status for v in report.variables}["gt1l/heights/h_ph"] == "error"


def test_tampered_sidecar_is_caught(tmp_path: Path) -> None:
    _, sidecar = _indexed(tmp_path)
    doc = json.loads(Path(sidecar).read_text())
    refs = doc["refs"]
    refs["grid/0.0"], refs["grid/1.0"] = refs["grid/1.0"], refs["grid/0.0"]
    Path(sidecar).write_text(json.dumps(doc))
    report = verify_refs(sidecar, sample=0)
    assert not report.ok and not report.source_changed
    grid = {v.path: v for v in report.variables}["grid"]
    assert grid.status == "different" and grid.mismatched == 2
    assert grid.message.startswith("chunk (0, 0)")


def test_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    src, sidecar = _indexed(tmp_path)
    src.unlink()
    with pytest.raises(SourceNotFoundError, match="no longer exists"):
        verify_refs(sidecar)


def test_verify_on_s3(tmp_path: Path, s3, s3_bucket: str, s3_storage_options) -> None:
    src = write_granule(tmp_path / "a.h5", n=1500)
    s3.put(str(src), f"{s3_bucket}/in/a.h5")
    report = index_many(f"s3://{s3_bucket}/in/a.h5", f"s3://{s3_bucket}/out",
                        storage_options=s3_storage_options, executor="serial", checksums=True)
    assert report.ok
    result = verify_refs(report.granules[0].sidecar, sample=1,
                         storage_options=s3_storage_options)
    assert result.ok and result.recorded.etag == result.current.etag
    assert all(v.chunks_checked >= 1 for v in result.variables)


def test_verify_reads_a_remote_source_with_the_collector_paused(
    tmp_path: Path, s3, s3_bucket: str, s3_storage_options, monkeypatch: pytest.MonkeyPatch
) -> None:
    """h5py reads a remote source through fsspec's I/O thread while holding its global lock;
    a garbage collection there that frees an h5py object would wait for that lock forever, so
    no collection may run meanwhile.  Every read of the source is made with it paused."""
    import gc

    from h5sidecar.workflows.checks import _verify

    src = write_granule(tmp_path / "a.h5", n=1500)
    s3.put(str(src), f"{s3_bucket}/gc/a.h5")
    report = index_many(f"s3://{s3_bucket}/gc/a.h5", f"s3://{s3_bucket}/gc-out",
                        storage_options=s3_storage_options, executor="serial")
    opened = _verify._open_source
    enabled: list[bool] = []

    @contextlib.contextmanager
    def watched(url: str, opts: Any) -> Iterator[Any]:
        with opened(url, opts) as raw:
            read = raw.read

            def noted(*args: Any) -> bytes:
                enabled.append(gc.isenabled())
                return read(*args)  # type: ignore[no-any-return]

            monkeypatch.setattr(raw, "read", noted)
            yield raw

    monkeypatch.setattr(_verify, "_open_source", watched)
    assert gc.isenabled()
    assert verify_refs(report.granules[0].sidecar, sample=1,
                       storage_options=s3_storage_options).ok
    assert enabled and not any(enabled), f"{sum(enabled)} of {len(enabled)} reads collected"
    assert gc.isenabled()  # restored


def test_a_shape_other_than_h5pys_is_a_difference(tmp_path: Path) -> None:
    """An empty array where h5py has rows (issue 24: a virtual dataset read as shape 0) has no
    chunk to compare: the shape comparison alone catches it."""
    _, sidecar = _indexed(tmp_path)
    doc = json.loads(Path(sidecar).read_text())
    refs = doc["refs"]
    zarray = json.loads(refs["grid/.zarray"])
    refs["grid/.zarray"] = json.dumps({**zarray, "shape": [0, 40]})
    for key in [k for k in refs if k.startswith("grid/") and not k.split("/")[-1].startswith(".")]:
        del refs[key]
    Path(sidecar).write_text(json.dumps(doc))
    report = verify_refs(sidecar, sample=0)
    assert not report.ok
    grid = {v.path: v for v in report.variables}["grid"]
    assert grid.status == "different"
    assert grid.message == "shape (0, 40) in the sidecar, (30, 40) in h5py"
