"""kerchunk Parquet: exact LazyReferenceMapper layout, round trips, kerchunk interop, sizes."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import GranuleRefs, from_kerchunk, read_refs, write_parquet
from h5sidecar.references.parquet_sidecar._kerchunk_parquet import (
    CHECKSUMS_FILE,
    MANIFESTS_FILE,
    decode_zmetadata,
    read_parquet_parts,
)
from h5sidecar.references.parquet_sidecar._parquet_write import encode_parquet
from tests.references._h5refs import kerchunk_translate, refs_from_h5, write_sample
from tests.references._strategies import granule_refs
from tests.references.test_json import small_refs


def _files(g: GranuleRefs, record_size: int, manifests_file: bool = True) -> dict[str, bytes]:
    return dict(encode_parquet(g, record_size=record_size, manifests_file=manifests_file))


def _read(files: dict[str, bytes]) -> GranuleRefs:
    def fetch(rels: list[str]) -> dict[str, bytes | None]:
        return {r: files.get(r) for r in rels}

    return read_parquet_parts(decode_zmetadata(files[".zmetadata"]), fetch)


def test_layout_matches_lazy_reference_mapper() -> None:
    g = small_refs()  # g/v: 2x3 grid [[0, MISSING, 0], [INLINE, 0, INLINE]]; s: 0-d
    files = _files(g, record_size=2)
    assert list(files)[-1] == ".zmetadata"  # the commit marker comes last
    assert set(files) == {
        "g/v/refs.0.parq",
        "g/v/refs.1.parq",
        "g/v/refs.2.parq",
        "s/refs.0.parq",
        CHECKSUMS_FILE,
        MANIFESTS_FILE,
        ".zmetadata",
    }
    zmeta = json.loads(files[".zmetadata"])
    assert zmeta["record_size"] == 2
    assert zmeta["metadata"] == g.zmetadata()
    assert "h5sidecar" in zmeta and "h5sidecar" not in zmeta["metadata"]
    rows = {r: pq.read_table(io.BytesIO(files[f"g/v/refs.{r}.parq"])).to_pylist() for r in range(3)}
    url = "s3://bucket/g.h5"
    assert rows[0] == [
        {"path": url, "offset": 100, "size": 50, "raw": None},
        {"path": None, "offset": 0, "size": 0, "raw": None},  # missing
    ]
    assert rows[1] == [
        {"path": url, "offset": 5, "size": 6, "raw": None},
        {"path": None, "offset": 0, "size": 0, "raw": b"abc"},  # inline
    ]
    assert rows[2][1] == {"path": None, "offset": 0, "size": 0, "raw": b"\x00\xff"}
    schema = pq.read_schema(io.BytesIO(files["g/v/refs.0.parq"]))
    assert schema.names == ["path", "offset", "size", "raw"]
    assert schema.field("offset").type == pa.int64() and not schema.field("offset").nullable
    assert pq.read_table(io.BytesIO(files["s/refs.0.parq"])).num_rows == 1  # 0-d: one row


def test_all_missing_records_have_no_file_and_paths_are_dictionary_encoded() -> None:
    g = refs_with_grid(codes=[-1] * 30 + [0] * 30, record_size=30)
    files = _files(g, record_size=30)
    assert "v/refs.0.parq" not in files  # every chunk missing: fsspec reads that as KeyError
    pf = pq.ParquetFile(io.BytesIO(files["v/refs.1.parq"]))
    assert pf.metadata.metadata is None  # no pandas metadata (see the module docstring)
    path_column = pf.metadata.row_group(0).column(0)
    assert path_column.has_dictionary_page and path_column.compression == "ZSTD"
    assert pf.read().column("path").to_pylist() == ["/data/g.h5"] * 30
    assert _read(files) == g


def refs_with_grid(codes: list[int], record_size: int) -> GranuleRefs:
    from h5sidecar.references import ArrayMeta, ArrayRefs, ChunkManifest, SourceInfo

    n = len(codes)
    c = np.array(codes, dtype=np.int32)
    manifest = ChunkManifest.from_arrays(
        urls=["/data/g.h5"], codes=c, offsets=np.arange(n) * 10, lengths=np.where(c >= 0, 10, 0)
    )
    meta = ArrayMeta(shape=(n,), chunks=(1,), dtype="<i4", dimension_names=("x",))
    return GranuleRefs(SourceInfo("/data/g.h5", 10 * n), {}, {"v": ArrayRefs("v", meta, manifest)})


def test_roundtrip_small_on_disk(tmp_path: Path) -> None:
    g = small_refs()
    write_parquet(g, tmp_path / "g.parq", record_size=2)
    assert read_refs(tmp_path / "g.parq") == g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(granule_refs(), st.integers(1, 5))
def test_roundtrip_random(g: GranuleRefs, record_size: int) -> None:
    assert _read(_files(g, record_size)) == g


def test_reads_kerchunk_parquet(tmp_path: Path) -> None:
    pytest.importorskip("kerchunk.hdf")
    kerchunk_df = pytest.importorskip("kerchunk.df")
    h5 = write_sample(tmp_path / "s.h5")
    refs = kerchunk_translate(h5)
    kerchunk_df.refs_to_dataframe(refs, str(tmp_path / "k.parq"), record_size=3)
    theirs = read_refs(tmp_path / "k.parq")
    assert theirs == from_kerchunk(refs)
    for path, arr in refs_from_h5(h5).arrays.items():
        assert theirs.arrays[path].manifest == arr.manifest, path


def _corrupt(files: dict[str, bytes], name: str, data: bytes | None) -> dict[str, bytes]:
    out = dict(files)
    if data is None:
        out.pop(name)
    else:
        out[name] = data
    return out


def _table_bytes(**columns: list[object]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


_CASES: list[tuple[str, Callable[[dict[str, bytes]], bytes | None], str]] = [
    (".zmetadata", lambda f: b"{truncated", "not valid JSON"),
    (".zmetadata", lambda f: json.dumps({"metadata": {}}).encode(), "record_size"),
    (".zmetadata", lambda f: b"[]", "'metadata' object"),
    (
        "g/v/refs.0.parq",
        lambda f: f["g/v/refs.0.parq"][: len(f["g/v/refs.0.parq"]) // 2],
        "not a readable Parquet file",
    ),
    (
        "g/v/refs.0.parq",
        lambda f: _table_bytes(path=["s3://bucket/g.h5"], offset=[1], size=[1]),
        "has 1 rows, expected 2",
    ),
    (
        "g/v/refs.0.parq",
        lambda f: _table_bytes(path=["s3://bucket/g.h5", None], offset=[-5, 0], size=[4, 0]),
        "offsets must be >= 0",
    ),
    (
        "g/v/refs.0.parq",
        lambda f: _table_bytes(path=["s3://bucket/g.h5"] * 2, offset=[0, 0], size=[0, 0]),
        "whole-object",
    ),
    ("g/v/refs.0.parq", lambda f: _table_bytes(path=[None, None], offset=[0, 0]), "lacks column"),
    (
        "g/v/refs.0.parq",
        lambda f: _table_bytes(path=[None, None], offset=["a", "b"], size=[0, 0]),
        "integer column",
    ),
    (CHECKSUMS_FILE, lambda f: None, "checksums"),
]


@pytest.mark.parametrize(("name", "make", "match"), _CASES)
def test_malformed(name: str, make: Callable[[dict[str, bytes]], bytes | None], match: str) -> None:
    # the kerchunk layout alone: record files are what is read
    files = _files(small_refs(), record_size=2, manifests_file=False)
    with pytest.raises(InvalidReferenceError, match=match):
        _read(_corrupt(files, name, make(files)))


def _bulk_table(**override: list[object]) -> bytes:
    columns: dict[str, list[object]] = {
        "array": ["g/v"],
        "chunk": [0],
        "url": ["s3://bucket/g.h5"],
        "offset": [100],
        "size": [50],
        "raw": [None],
    }
    columns.update(override)
    return _table_bytes(**{k: v for k, v in columns.items() if v != ["DROP"]})


_BULK_CASES: list[tuple[Callable[[dict[str, bytes]], bytes | None], str]] = [
    (lambda f: f[MANIFESTS_FILE][: len(f[MANIFESTS_FILE]) // 2], "not a readable Parquet file"),
    (lambda f: None, "is missing though .zmetadata lists it"),
    (lambda f: _bulk_table(array=["nope"]), "names arrays the metadata lacks"),
    (lambda f: _bulk_table(chunk=[6]), "chunk number outside its 6 chunks"),
    (lambda f: _bulk_table(offset=[-1]), "offsets must be >= 0"),
    (lambda f: _bulk_table(size=["DROP"]), "lacks column"),
    (lambda f: _bulk_table(offset=["x"]), "integer column"),
]


@pytest.mark.parametrize(("make", "match"), _BULK_CASES)
def test_malformed_manifests_file(
    make: Callable[[dict[str, bytes]], bytes | None], match: str
) -> None:
    files = _files(small_refs(), record_size=2)
    with pytest.raises(InvalidReferenceError, match=match):
        _read(_corrupt(files, MANIFESTS_FILE, make(files)))


def test_manifests_file_holds_every_chunk_once() -> None:
    g = small_refs()
    files = _files(g, record_size=2)
    table = pq.read_table(io.BytesIO(files[MANIFESTS_FILE])).to_pylist()
    # stored and inline chunks, each once; missing chunks are absent
    assert sorted((r["array"], r["chunk"]) for r in table) == sorted(
        (p, i)
        for p, a in g.arrays.items()
        for i, c in enumerate(a.manifest.codes.reshape(-1).tolist())
        if c != -1
    )
    inline = {(r["array"], r["chunk"]): r["raw"] for r in table if r["raw"] is not None}
    assert inline == {(p, i): b for p, a in g.arrays.items() for i, b in a.manifest.inline.items()}
    assert inline[("g/v", 3)] == b"abc"
    # the sidecar reads the same through the manifests file and through the record files
    assert _read(files) == g
    assert _read(_files(g, record_size=2, manifests_file=False)) == g


def test_truncated_record_on_disk(tmp_path: Path) -> None:
    dest = tmp_path / "g.parq"
    write_parquet(small_refs(), dest, record_size=2, manifests_file=False)
    rec = dest / "g" / "v" / "refs.1.parq"
    rec.write_bytes(rec.read_bytes()[:40])
    with pytest.raises(InvalidReferenceError, match=r"g/v/refs\.1\.parq is not a readable"):
        read_refs(dest, lazy=False)
    lazy = read_refs(dest)  # opening reads .zmetadata only: the damage shows on first use
    assert lazy.arrays["s"].manifest == small_refs().arrays["s"].manifest
    with pytest.raises(InvalidReferenceError, match=r"g/v/refs\.1\.parq is not a readable"):
        lazy.arrays["g/v"].manifest  # noqa: B018


def _many_chunk_file(path: Path, n_chunks: int, kind: str) -> Path:
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset(
            "gt1l/heights/h_ph",
            shape=(n_chunks * 8,),
            dtype="<f4",
            chunks=(8,),
            compression="gzip",
            shuffle=True,
        )
        if kind == "noise":  # chunk sizes vary: the hardest case for the size column
            ds[...] = rng.normal(0, 1, n_chunks * 8).astype("<f4")
        else:  # a ramp: many equal chunk sizes
            ds[...] = np.arange(n_chunks * 8, dtype="<f4") % 1000
    return path


def _tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize("kind", ["noise", "ramp"])
@pytest.mark.parametrize("record_size", [10_000, 100_000])
def test_parquet_no_larger_than_kerchunks(tmp_path: Path, record_size: int, kind: str) -> None:
    pytest.importorskip("kerchunk.hdf")
    kerchunk_df = pytest.importorskip("kerchunk.df")
    n = 20_000
    h5 = _many_chunk_file(tmp_path / "many.h5", n, kind)
    ours = refs_from_h5(h5)
    write_parquet(ours, tmp_path / "ours.parq", record_size=record_size)
    refs = kerchunk_translate(h5)
    kerchunk_df.refs_to_dataframe(refs, str(tmp_path / "k.parq"), record_size=record_size)
    bulk = (tmp_path / "ours.parq" / MANIFESTS_FILE).stat().st_size
    ours_size, theirs_size = _tree_size(tmp_path / "ours.parq"), _tree_size(tmp_path / "k.parq")
    print(
        f"{kind}, record_size={record_size}: ours {(ours_size - bulk) / n:.2f} B/chunk "
        f"(+ {bulk / n:.2f} B/chunk in the manifests file), kerchunk {theirs_size / n:.2f} B/chunk"
    )
    # the kerchunk-compatible part is no larger than kerchunk's own; the all-arrays manifests
    # file (an accelerator plain readers ignore) costs less than the record files it mirrors
    assert ours_size - bulk <= theirs_size
    assert bulk < ours_size - bulk
    assert read_refs(tmp_path / "ours.parq") == ours  # and it is still lossless


def cube_like_refs(n: int) -> tuple[GranuleRefs, tuple[str, ...]]:
    """References shaped like a cube's: ``tas`` and ``pr`` of ``n`` chunks, chunk ``i`` in
    member ``i``, both arrays on one tuple of the ``n`` members' URLs (as a build makes it)."""
    from h5sidecar.references import ArrayMeta, ArrayRefs, ChunkManifest, SourceInfo

    urls = tuple(f"/data/collection/granule_{i:07d}.nc" for i in range(n))
    rng = np.random.default_rng(0)

    def array(path: str) -> ArrayRefs:
        meta = ArrayMeta(shape=(n,), chunks=(1,), dtype="<f4", fill_value=None,
                         dimension_names=("time",))
        manifest = ChunkManifest.from_checked(
            urls=urls, codes=np.arange(n, dtype=np.int32),
            offsets=rng.integers(0, 2**20, n).astype(np.uint64),
            lengths=np.full(n, 4, np.uint64), inline={})
        return ArrayRefs(path=path, meta=meta, manifest=manifest)

    return GranuleRefs(SourceInfo(url=urls[0], size=2**50), {"": {}},
                       {"tas": array("tas"), "pr": array("pr")}), urls


def test_record_files_of_arrays_on_one_url_tuple_make_it_arrow_once(tmp_path: Path) -> None:
    """A cube's arrays share one tuple of every member's URL: it is made into Arrow once for
    all their record files, and a record's table is freed before the next is built (Arrow's
    peak here ~125 bytes a member before, ~84 now); the files read back the same."""
    g, urls = cube_like_refs(60_000)
    default = pa.default_memory_pool()
    pool = pa.proxy_memory_pool(default)
    pa.set_memory_pool(pool)
    try:
        files = dict(encode_parquet(g, manifests_file=False))
    finally:
        pa.set_memory_pool(default)
    per_member = pool.max_memory() / len(urls)
    assert per_member < 105, f"{per_member:.0f} bytes a member"
    write_parquet(g, tmp_path / "cube.parq", manifests_file=False)
    back = read_refs(str(tmp_path / "cube.parq"), lazy=False)
    for path, arr in g.arrays.items():
        assert back.arrays[path].manifest == arr.manifest
    assert set(files) >= {"tas/refs.0.parq", "pr/refs.0.parq", ".zmetadata"}
