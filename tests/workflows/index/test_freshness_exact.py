"""Source identity is compared exactly: a same-size rewrite 1.4 s after indexing is a change.

``math.isclose`` on float mtimes allowed ~1.8 s at today's timestamps: ``index`` called such a
granule up to date and ``verify`` passed it.  Integer nanoseconds (or the ETag) decide now.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import SourceInfo
from h5sidecar.workflows import index_many, verify_refs
from tests.workflows.conftest import write_granule

NOW_NS = 1_763_000_000_123_456_789  # late 2025, where a float second has ~0.24 us resolution


def _rewrite_same_size_later(src: Path, seconds: float = 1.4) -> None:
    """Rewrite one stored byte of an uncompressed chunk (still decodes), size kept, and move
    the mtime ``seconds`` later."""
    with h5py.File(src, "r") as f:
        info = f["gt1l/heights/quality"].id.get_chunk_info(0)
    st = src.stat()
    with open(src, "r+b") as fh:
        fh.seek(info.byte_offset)
        b = fh.read(1)
        fh.seek(info.byte_offset)
        fh.write(bytes([(b[0] + 1) % 5]))
    later = st.st_mtime_ns + int(seconds * 1e9)
    os.utime(src, ns=(later, later))


def test_same_object_compares_nanoseconds_exactly() -> None:
    a = SourceInfo("f", 10, mtime_ns=NOW_NS)
    assert a.same_object(SourceInfo("f", 10, mtime_ns=NOW_NS))
    assert not a.same_object(SourceInfo("f", 10, mtime_ns=NOW_NS + 1_400_000_000))
    assert not a.same_object(SourceInfo("f", 10, mtime_ns=NOW_NS + 1))
    assert not a.same_object(SourceInfo("f", 11, mtime_ns=NOW_NS))


def test_same_object_float_seconds_tolerate_only_rounding() -> None:
    ns = NOW_NS
    old = SourceInfo("f", 10, mtime=ns / 1e9)  # a sidecar written before mtime_ns existed
    assert old.same_object(SourceInfo("f", 10, mtime=(ns + 100) / 1e9, mtime_ns=ns + 100))
    assert not old.same_object(SourceInfo("f", 10, mtime=ns / 1e9 + 1.4))
    assert not old.same_object(SourceInfo("f", 10, mtime=ns / 1e9 + 0.001))


def test_whole_second_stores_compare_at_seconds() -> None:
    # an HTTP Last-Modified header has whole seconds; a listing may have milliseconds
    head = SourceInfo("s3://b/k", 10, mtime=1_763_000_000.0)
    assert head.same_object(SourceInfo("s3://b/k", 10, mtime=1_763_000_000.250))
    assert not head.same_object(SourceInfo("s3://b/k", 10, mtime=1_763_000_001.4))


def test_etag_decides_when_both_have_one() -> None:
    a = SourceInfo("s3://b/k", 10, etag="abc", mtime_ns=NOW_NS)
    assert a.same_object(SourceInfo("s3://b/k", 10, etag="abc", mtime_ns=NOW_NS + 5))
    assert not a.same_object(SourceInfo("s3://b/k", 10, etag="abd", mtime_ns=NOW_NS))


def test_mtime_ns_round_trips_json_exactly() -> None:
    info = SourceInfo("f", 10, mtime=NOW_NS / 1e9, mtime_ns=NOW_NS)
    back = SourceInfo.from_dict(json.loads(json.dumps(info.to_dict())))
    assert back.mtime_ns == NOW_NS and back == info
    assert SourceInfo.from_dict({"url": "f", "size": 1, "mtime_ns": str(NOW_NS)}).mtime_ns == NOW_NS
    with pytest.raises(InvalidReferenceError):
        SourceInfo.from_dict({"url": "f", "size": 1, "mtime_ns": 1.5})


def test_sidecar_records_integer_nanoseconds(tmp_path: Path) -> None:
    src = write_granule(tmp_path / "in" / "a.h5")
    report = index_many(str(src), str(tmp_path / "out"), format="json", executor="serial")
    doc = json.loads(Path(report.granules[0].sidecar).read_text())
    assert doc["h5sidecar"]["source"]["mtime_ns"] == src.stat().st_mtime_ns


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_index_reindexes_a_same_size_rewrite_1_4_s_later(tmp_path: Path, fmt: str) -> None:
    src = write_granule(tmp_path / "in" / "a.h5")
    out = str(tmp_path / "out")
    assert index_many(str(src), out, format=fmt, executor="serial").ok
    assert index_many(str(src), out, format=fmt, executor="serial").granules[0].status == "up_to_date"
    _rewrite_same_size_later(src)
    again = index_many(str(src), out, format=fmt, executor="serial")
    assert again.granules[0].status == "ok", again.to_dict()


def test_verify_flags_a_same_size_rewrite_1_4_s_later(tmp_path: Path) -> None:
    src = write_granule(tmp_path / "in" / "a.h5")
    report = index_many(str(src), str(tmp_path / "out"), format="json", executor="serial")
    sidecar = report.granules[0].sidecar
    assert verify_refs(sidecar, sample=0).ok
    with h5py.File(src, "r") as f:
        original = f["gt1l/heights/quality"][:]
    _rewrite_same_size_later(src)
    with h5py.File(src, "r") as f:
        assert not np.array_equal(f["gt1l/heights/quality"][:], original)  # it really changed
    checked = verify_refs(sidecar, sample=0)
    assert checked.source_changed and not checked.ok
