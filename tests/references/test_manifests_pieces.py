"""A large manifests file is written in row groups, each with a URL dictionary of its own (the
write's memory bounded by a piece); every reader reads it, and files of one row group (every
granule's, cubes written before) as they did."""

from __future__ import annotations

import io
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings

from h5sidecar.references import GranuleRefs, read_refs, write_parquet
from h5sidecar.references.parquet_sidecar import _manifests_file as bulk
from h5sidecar.references.parquet_sidecar import _manifests_pieces
from h5sidecar.references.parquet_sidecar._manifests_file import (
    MANIFESTS_FILE,
    decode_manifests,
    encode_manifests,
)
from h5sidecar.references.parquet_sidecar._manifests_pieces import PIECE_ROWS
from tests.references._strategies import granule_refs
from tests.references.test_json import small_refs
from tests.references.test_parquet import _files, _read, cube_like_refs


def _url_dictionaries(data: bytes) -> list[int]:
    """The size of each row group's ``url`` dictionary."""
    f = pq.ParquetFile(pa.BufferReader(data), read_dictionary=["url"])
    return [len(f.read_row_group(i, columns=["url"]).column("url").chunk(0).dictionary)
            for i in range(f.metadata.num_row_groups)]


def _decoded_equal(data: bytes, g: GranuleRefs) -> None:
    columns = decode_manifests(data, {p: a.meta for p, a in g.arrays.items()})
    for path, arr in g.arrays.items():
        assert columns.manifest(path, arr.manifest.urls) == arr.manifest  # type: ignore[union-attr]


def test_a_cube_manifests_file_is_written_in_pieces_each_on_its_own_urls(tmp_path: Path) -> None:
    n = 70_000  # two arrays: 140,000 rows, three row groups
    g, _ = cube_like_refs(n)
    data = encode_manifests(g)
    sizes = _url_dictionaries(data)
    # before: one row group whose dictionary was every member's URL (Parquet's encoder
    # memoized all of them at once: ~255 MB at a million members)
    assert len(sizes) == 3 and max(sizes) <= PIECE_ROWS, sizes
    assert sum(sizes) == 2 * n  # each array's rows name each member once
    _decoded_equal(data, g)
    write_parquet(g, tmp_path / "cube.parq")
    for lazy in (True, False):  # the lazy open's bulk load and the eager read
        back = read_refs(str(tmp_path / "cube.parq"), lazy=lazy)
        for path, arr in g.arrays.items():
            assert back.arrays[path].manifest == arr.manifest


def test_a_granules_file_is_one_row_group_as_before() -> None:
    data = encode_manifests(small_refs())
    assert pq.read_metadata(io.BytesIO(data)).num_row_groups == 1


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(g=granule_refs())
def test_pieces_read_as_one_row_group_does(g: GranuleRefs) -> None:
    """Inline, missing and stored chunks of several URLs cut into pieces of 3 rows: the same
    manifests through the manifests file as with one row group (the file written before) and
    as through the record files."""
    with mock.patch.object(_manifests_pieces, "PIECE_ROWS", 3):
        files = _files(g, record_size=4)
    with mock.patch.object(_manifests_pieces, "PIECE_ROWS", 10**9):
        whole = encode_manifests(g)
    assert pq.read_metadata(io.BytesIO(whole)).num_row_groups <= 1
    metas = {p: a.meta for p, a in g.arrays.items()}
    with mock.patch.object(bulk, "SMALL_ROWS", -1):  # the column-wise decode of any size
        pieces, one = decode_manifests(files[MANIFESTS_FILE], metas), decode_manifests(whole, metas)
        for path, arr in g.arrays.items():
            # the extras list an array's URLs in order (every writer's); without them, the
            # order of several is the file's dictionary's, which pieces give differently
            orders = [arr.manifest.urls, *([None] if len(arr.manifest.urls) < 2 else [])]
            for order in orders:
                assert pieces.manifest(path, order) == one.manifest(path, order)  # type: ignore[union-attr]
    assert _read(files) == g
