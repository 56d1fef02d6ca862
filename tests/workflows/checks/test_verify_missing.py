"""``verify`` on never-written chunks, in every sidecar format (issue 24, item 5).

A never-written chunk is a row whose ``path`` is null in a kerchunk Parquet record file.
fsspec's ``LazyReferenceMapper(engine="pyarrow")`` under pandas >= 3 reads that null as a NaN
URL, so ``verify`` crashed inside its check (``TypeError: argument of type 'float' is not
iterable``) and reported differences on good sidecars.  Good sidecars must pass (exit 0) in
every format and layout; a tampered chunk must still fail (exit 1).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from h5sidecar.cli import main
from h5sidecar.indexer import index_granule
from h5sidecar.references import read_refs, write_refs
from h5sidecar.workflows import verify_refs
from h5sidecar.workflows.checks._plain_parquet import (
    NullKeepingReferenceMapper,
    record_columns_as_fsspec_expects,
)
from tests._unwritten import KEPT_MISSING, unwritten_index, with_chunk, write_unwritten_granule

#: (id, ``index`` options, sidecar name)
FORMATS = [
    ("json", ["--format", "json"], "g.h5.json"),
    ("parquet-kerchunk", ["--format", "parquet", "--layout", "kerchunk"], "g.h5.parq"),
    ("parquet-compact", ["--format", "parquet", "--layout", "compact"], "g.h5.parq"),
]


@pytest.fixture(scope="module")
def granule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_unwritten_granule(tmp_path_factory.mktemp("unwritten") / "in" / "g.h5")


def _index(granule: Path, dest: Path, options: list[str], name: str,
           capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["index", str(granule), "-o", str(dest), "--serial", *options]) == 0
    capsys.readouterr()
    return str(dest / name)


@pytest.mark.parametrize(("options", "name"), [f[1:] for f in FORMATS], ids=[f[0] for f in FORMATS])
def test_good_sidecar_with_unwritten_chunks_verifies(
    granule: Path, tmp_path: Path, options: list[str], name: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fsspec's default Parquet engine is not a dependency: verify must not need it
    monkeypatch.setitem(sys.modules, "fastparquet", None)
    sidecar = _index(granule, tmp_path / "out", options, name, capsys)
    refs = read_refs(sidecar)
    for path in KEPT_MISSING:  # the sidecar really holds the never-written chunk as missing
        assert refs.arrays[path].manifest.get(unwritten_index(path)) is None, path
    assert main(["verify", sidecar, "--sample", "all", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    problems = [v for v in doc["variables"] if v["status"] != "ok"]
    assert doc["ok"] and not problems, problems
    assert len(doc["variables"]) == len(refs.arrays) == 24
    assert all(v["chunks_checked"] == v["chunks_total"] for v in doc["variables"])
    # a sample draws the never-written chunk too (one per variable that has one)
    sampled = verify_refs(sidecar, sample=1, seed=3)
    assert sampled.ok
    assert all(v.chunks_checked == 2 for v in sampled.variables if v.path in KEPT_MISSING)


@pytest.mark.parametrize(("options", "name"), [f[1:] for f in FORMATS], ids=[f[0] for f in FORMATS])
def test_tampered_chunk_still_fails(
    granule: Path, tmp_path: Path, options: list[str], name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good = _index(granule, tmp_path / "good", options, name, capsys)
    refs = read_refs(good, lazy=False)
    # a never-written chunk now points at a written chunk's bytes (h5py reads the fill value)
    refs = with_chunk(refs, "i4_1d_middle", unwritten_index("i4_1d_middle"), like=(0,))
    # a written chunk now reads as never written (h5py reads data)
    refs = with_chunk(refs, "f8_2d_first", (1, 1), like=None)
    refs = with_chunk(refs, "S6_1d_last", (0,), like=None)
    layout = "compact" if "compact" in options else "kerchunk"
    fmt = "json" if "json" in options else "parquet"
    bad = write_refs(refs, tmp_path / "bad" / name, format=fmt, layout=layout)
    assert main(["verify", bad, "--sample", "all", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    status = {v["path"]: (v["status"], v["mismatched"]) for v in doc["variables"]}
    tampered = {"i4_1d_middle", "f8_2d_first", "S6_1d_last"}
    assert {p: s for p, s in status.items() if p in tampered} == dict.fromkeys(
        tampered, ("different", 1)
    )
    assert all(s == ("ok", 0) for p, s in status.items() if p not in tampered)


def test_record_columns_keep_nulls_as_none(tmp_path: Path) -> None:
    # kerchunk's writer (pandas categorical -> Arrow dictionary) and ours (plain string)
    path = pa.array(["s3://b/g.h5", None, None, "s3://b/g.h5"])
    for column in (path, path.dictionary_encode()):
        table = pa.table({
            "path": column,
            "offset": pa.array([8, 0, 0, 80], pa.int64()),
            "size": pa.array([72, 0, 0, 9], pa.int64()),
            "raw": pa.array([None, b"inline", None, None], pa.binary()),
        })
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        cols = record_columns_as_fsspec_expects(sink.getvalue().to_pybytes())
        assert cols["path"].tolist() == ["s3://b/g.h5", None, None, "s3://b/g.h5"]
        assert cols["raw"].tolist() == [None, b"inline", None, None]
        assert cols["offset"].tolist() == [8, 0, 0, 80] and cols["size"].tolist() == [72, 0, 0, 9]


def test_mapper_reads_unwritten_chunks_as_missing(granule: Path, tmp_path: Path) -> None:
    sidecar = write_refs(index_granule(str(granule)), tmp_path / "g.h5.parq")
    mapper = NullKeepingReferenceMapper(sidecar, fs=fsspec.filesystem("file"))
    stored = mapper["i4_1d_middle/0"]
    assert isinstance(stored, list) and stored[0] == str(granule)
    # this fsspec still assigns the loader we replace (else the mapper falls back to its own)
    assert mapper.open_refs.__qualname__.startswith("NullKeepingReferenceMapper.")
    with pytest.raises(KeyError):
        mapper["i4_1d_middle/2"]  # never written, inside a record
    with pytest.raises(KeyError):
        mapper["i4_2d_last/2.1"]  # the record's last row
