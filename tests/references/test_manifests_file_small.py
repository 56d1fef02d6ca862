"""The manifests file decoded in plain Python (small files) equals the column-wise decode."""

from __future__ import annotations

import io
from collections.abc import Callable
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import GranuleRefs
from h5sidecar.references._manifest import ChunkManifest
from h5sidecar.references.parquet_sidecar import _manifests_file as bulk
from h5sidecar.references.parquet_sidecar._manifests_file import (
    MANIFESTS_FILE,
    decode_manifests,
    encode_manifests,
)
from h5sidecar.references.parquet_sidecar._manifests_file_small import SMALL_ROWS, SmallBulkColumns
from tests.references._strategies import granule_refs
from tests.references.test_json import small_refs
from tests.references.test_parquet import _BULK_CASES, _corrupt, _files, _read, cube_like_refs


def _both(data: bytes, g: GranuleRefs) -> tuple[object, object]:
    metas = {p: a.meta for p, a in g.arrays.items()}
    small = decode_manifests(data, metas)
    with mock.patch.object(bulk, "SMALL_ROWS", -1):  # every file through the column-wise path
        columns = decode_manifests(data, metas)
    return small, columns


def _same_columns(a: object, b: object) -> None:
    for field in ("flat", "offsets", "lengths"):
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype and np.array_equal(x, y), field
    assert a.urls.to_pylist() == b.urls.to_pylist()  # type: ignore[attr-defined]
    assert a.inline == b.inline  # type: ignore[attr-defined]


def _same_layout(got: ChunkManifest, want: ChunkManifest) -> None:
    """The small decode's manifest (built unchecked from checked rows) has the arrays a
    checked build has: dtypes, shapes, C order, read-only."""
    for x, y in ((got.codes, want.codes), (got.offsets, want.offsets),
                 (got.lengths, want.lengths)):  # fmt: skip
        assert (x.dtype, x.shape) == (y.dtype, y.shape)
        assert x.flags.c_contiguous and not x.flags.writeable
    assert all(type(v) is bytes for v in got.inline.values())


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(granule_refs())
def test_small_decode_equals_column_decode(g: GranuleRefs) -> None:
    data = encode_manifests(g)
    small, columns = _both(data, g)
    rows = pq.read_metadata(io.BytesIO(data)).num_rows
    assert isinstance(small, SmallBulkColumns) == (rows <= SMALL_ROWS)
    assert not isinstance(columns, SmallBulkColumns)
    assert list(small) == list(columns) == list(g.arrays)  # type: ignore[call-overload]
    for path, arr in g.arrays.items():
        _same_columns(small[path], columns[path])  # type: ignore[index]
        for order in (None, arr.manifest.urls):
            got = small.manifest(path, order)  # type: ignore[attr-defined]
            assert got == columns.manifest(path, order)  # type: ignore[attr-defined]
            _same_layout(got, columns.manifest(path, order))  # type: ignore[attr-defined]
        assert small.manifest(path, arr.manifest.urls) == arr.manifest  # type: ignore[attr-defined]


def test_small_decode_of_inline_missing_and_two_urls() -> None:
    g = small_refs()  # g/v: 2x3 grid [[0, MISSING, 0], [INLINE, 0, INLINE]]; s: 0-d
    small, columns = _both(encode_manifests(g), g)
    assert isinstance(small, SmallBulkColumns)
    for path, arr in g.arrays.items():
        assert small.manifest(path, arr.manifest.urls) == arr.manifest  # type: ignore[attr-defined]
        assert small.manifest(path, None) == columns.manifest(path, None)  # type: ignore[attr-defined]
    with pytest.raises(InvalidReferenceError, match="not among the array's URLs"):
        small.manifest("g/v", ("s3://elsewhere/x.h5",))  # type: ignore[attr-defined]
    with pytest.raises(KeyError):
        small["nope"]  # type: ignore[index]


@pytest.mark.parametrize("small", [True, False], ids=["python", "columns"])
@pytest.mark.parametrize(("make", "match"), _BULK_CASES)
def test_malformed_manifests_file_either_way(
    make: Callable[[dict[str, bytes]], bytes | None], match: str, small: bool
) -> None:
    files = _files(small_refs(), record_size=2)
    with mock.patch.object(bulk, "SMALL_ROWS", SMALL_ROWS if small else -1), \
            pytest.raises(InvalidReferenceError, match=match):  # fmt: skip
        _read(_corrupt(files, MANIFESTS_FILE, make(files)))


@pytest.mark.parametrize("small", [True, False], ids=["python", "columns"])
def test_a_stored_chunk_without_url_is_refused_either_way(small: bool) -> None:
    table = pa.table({"array": pa.array(["s"]).dictionary_encode(), "chunk": [0],
                      "url": pa.array([None], pa.string()), "offset": [0], "size": [4],
                      "raw": pa.array([None], pa.binary())})  # fmt: skip
    buf = io.BytesIO()
    pq.write_table(table, buf)
    g = small_refs()
    with mock.patch.object(bulk, "SMALL_ROWS", SMALL_ROWS if small else -1), \
            pytest.raises(InvalidReferenceError, match="has no URL"):  # fmt: skip
        decode_manifests(buf.getvalue(), {p: a.meta for p, a in g.arrays.items()})


@pytest.mark.parametrize("n", [3, 200], ids=["few chunks", "many chunks"])
def test_a_chunk_past_the_end_of_its_source_is_refused(n: int) -> None:
    from h5sidecar.references import ChunkManifest
    from h5sidecar.references._assemble import _check_within_source

    codes = np.zeros(n, np.int32)
    codes[1] = -1  # a missing chunk's zero offset/length counts for nothing
    codes[-1] = 1  # the last chunk is in the second file
    offsets = np.arange(n, dtype=np.uint64) * 10
    lengths = np.where(codes == -1, 0, 10).astype(np.uint64)
    manifest = ChunkManifest.from_arrays(urls=("a.h5", "b.h5"), codes=codes, offsets=offsets,
                                         lengths=lengths)  # fmt: skip
    end_a = int(offsets[codes == 0].max() + 10)  # the furthest chunk end in a.h5
    end_b = int(offsets[-1] + 10)
    fits = {"a.h5": end_a, "b.h5": end_b}  # URL -> recorded size
    _check_within_source("v", manifest, fits)
    _check_within_source("v", manifest, {"a.h5": end_a})  # b unknown
    _check_within_source("v", manifest, {"a.h5": end_a, "b.h5": -1})  # b's size unknown
    with pytest.raises(InvalidReferenceError, match=rf"ends at byte {end_b}, past the end of b"):
        _check_within_source("v", manifest, {**fits, "b.h5": end_b - 1})
    with pytest.raises(InvalidReferenceError, match=rf"ends at byte {end_a}, past the end of a"):
        _check_within_source("v", manifest, {**fits, "a.h5": end_a - 1})


def _with_urls(g: GranuleRefs, urls: dict[str, tuple[str, ...]]) -> GranuleRefs:
    """``g`` whose arrays ``urls`` names point at those URLs (codes cycling over them)."""
    from dataclasses import replace

    arrays = dict(g.arrays)
    for path, table in urls.items():
        m = arrays[path].manifest
        codes = np.where(m.codes >= 0, np.arange(m.codes.size).reshape(m.codes.shape)
                         % len(table), m.codes)
        arrays[path] = replace(arrays[path], manifest=ChunkManifest.from_arrays(
            urls=table, codes=codes, offsets=m.offsets, lengths=m.lengths, inline=m.inline))
    return GranuleRefs(g.source, g.groups, arrays, g.skipped, g.extra)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(granule_refs())
def test_url_dictionary_without_a_mapping_is_the_same_file(g: GranuleRefs) -> None:
    """A first URL tuple that lists no URL twice is the dictionary's start as it is (no
    ``str -> int`` mapping of a cube's every member): the bytes are those of the mapping."""
    with mock.patch.object(bulk, "distinct_urls", lambda urls: False):  # always the mapping
        want = encode_manifests(g)
    assert encode_manifests(g) == want


def test_url_dictionary_of_shared_repeated_and_overlapping_url_tuples() -> None:
    g = small_refs()  # g/v: 4 stored or inline chunks; s: one
    shared = ("s3://b/2.h5", "s3://b/1.h5", "s3://b/3.h5")
    cases = [{"g/v": shared, "s": shared[:1]},  # another tuple after the first: mapped then
             {"g/v": ("s3://b/1.h5", "s3://b/1.h5"), "s": ("s3://b/0.h5",)},  # a URL twice
             {"s": ("s3://b/0.h5",), "g/v": shared}]
    for urls in cases:
        refs = _with_urls(g, urls)
        with mock.patch.object(bulk, "distinct_urls", lambda urls: False):
            want = encode_manifests(refs)
        data = encode_manifests(refs)
        assert data == want
        small, columns = _both(data, refs)
        for path, arr in refs.arrays.items():
            if len(set(arr.manifest.urls)) < len(arr.manifest.urls):
                continue  # read back with the URL once (as before)
            assert small.manifest(path, arr.manifest.urls) == arr.manifest  # type: ignore[attr-defined]
            assert columns.manifest(path, arr.manifest.urls) == arr.manifest  # type: ignore[attr-defined]


def test_a_cube_manifests_file_joins_no_column_whole() -> None:
    """A cube's arrays each hold a chunk a member: the file is written from each array's rows
    as Arrow chunks on numpy's buffers; joined first, every column was held twice over (~52
    bytes a row traced at the peak here, now ~40; a million members make 2-3 million rows),
    the bytes the same."""
    import tracemalloc

    n = 60_000
    g, urls = cube_like_refs(n)
    tracemalloc.start()
    try:
        data = encode_manifests(g)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"{peak / (2 * n):.0f} bytes a row")  # shown with -s
    assert peak / (2 * n) < 45, f"{peak / (2 * n):.0f} bytes a row"
    _, columns = _both(data, g)
    for path, arr in g.arrays.items():
        assert columns.manifest(path, urls) == arr.manifest  # type: ignore[attr-defined]
