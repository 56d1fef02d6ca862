"""A cube's manifests file in pieces (row groups, each with its own URL dictionary) reads
like the files through every reader; a cube written before (one row group) still reads and
takes an append, which writes the new layout."""

from __future__ import annotations

import io
from pathlib import Path
from unittest import mock

import pyarrow.parquet as pq

from h5sidecar.references import MANIFESTS_FILE
from h5sidecar.references.parquet_sidecar import _manifests_pieces
from h5sidecar.workflows import build_cube
from tests.workflows.cube.test_cube import _assert_raw_matches_h5py
from tests.workflows.cube.test_cube_append import _days, _index, _read_everywhere


def _row_groups(cube: Path) -> int:
    return pq.read_metadata(io.BytesIO((cube / MANIFESTS_FILE).read_bytes())).num_row_groups


def test_cube_in_pieces_reads_like_the_files_and_an_old_cube_takes_an_append(
    tmp_path: Path,
) -> None:
    old = _days(tmp_path / "nc", 0, 4)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    build_cube(str(sidecars), str(cube))  # 4 members: one row group, the layout of before
    assert _row_groups(cube) == 1
    _read_everywhere(str(cube), old)
    new = _days(tmp_path / "nc", 4, 5)
    _index(tmp_path / "nc", sidecars)
    with mock.patch.object(_manifests_pieces, "PIECE_ROWS", 4):  # a large cube's layout, on a small one
        result = build_cube(str(sidecars), str(cube), mode="append")
    assert result.action == "appended" and len(result.added) == 5
    assert _row_groups(cube) > 1
    files = old + new
    _read_everywhere(str(cube), files)  # engine="h5sidecar" (lazy open) and plain reference://
    _assert_raw_matches_h5py(str(cube), files)  # read_arrays, raw values


def test_an_open_of_a_few_arrays_reads_only_the_row_groups_that_hold_them(
    tmp_path: Path,
) -> None:
    """``read_refs(cube, arrays=[...])`` (an append's read of the coordinate) decodes only
    the row groups holding those arrays' rows, and gets the manifests a whole open gets."""
    from h5sidecar.references import read_refs

    files = _days(tmp_path / "nc", 0, 9)
    sidecars = _index(tmp_path / "nc", tmp_path / "sidecars")
    cube = tmp_path / "cube.parq"
    with mock.patch.object(_manifests_pieces, "PIECE_ROWS", 4):
        build_cube(str(sidecars), str(cube))
    groups = _row_groups(cube)
    assert groups > 3
    read: list[list[int]] = []
    real = pq.ParquetFile.read_row_groups

    def spy(self, row_groups, *args, **kwargs):
        read.append(list(row_groups))
        return real(self, row_groups, *args, **kwargs)

    whole = read_refs(str(cube), lazy=False)
    with mock.patch.object(pq.ParquetFile, "read_row_groups", spy):
        for names in (["time"], ["tas"], ["time", "lat"]):
            alone = read_refs(str(cube), arrays=names)
            for n in names:
                assert alone.arrays[n].manifest == whole.arrays[n].manifest, n
    # time and lat (inline, one chunk each) in the first group, tas in the groups of its chunks
    assert [len(r) for r in read] == [1, 3, 1], read
    assert all(len(r) < groups for r in read), (read, groups)
    _assert_raw_matches_h5py(str(cube), files)
