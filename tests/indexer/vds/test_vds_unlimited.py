"""Virtual datasets with unlimited and printf (``%b``) mappings: the extent and the values HDF5's
default view ("last available") gives, through every reader, or a skip with the reason.

HDF5 computes such a VDS's extent from its sources when it opens it; the indexer opens the
granule as a file object, where HDF5 finds no source, so it works the extent out itself (issue
24: the form of HDF5's own test file ``1_vds.h5`` came out as an empty array).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr

from h5sidecar.indexer import index_granule
from h5sidecar.read import read_arrays
from h5sidecar.references import GranuleRefs, write_json, write_parquet
from h5sidecar.workflows import verify_refs
from tests.indexer._compare import assert_refs_match_h5py

U = h5py.h5s.UNLIMITED
#: (start, count, stride, block) of a hyperslab, or None for ALL
Sel = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None


def _space(shape: tuple[int, ...], sel: Sel) -> h5py.h5s.SpaceID:
    space = h5py.h5s.create_simple(shape, (U, *shape[1:]))
    if sel is not None:
        start, count, stride, block = sel
        space.select_hyperslab(start, count, stride, block)
    return space


def _rows(sel_start: int, *, rank: int = 2, width: Sequence[int] = (4,)) -> Sel:
    """An unlimited block of whole rows from row ``sel_start`` (HDF5's form of ``[n:UNLIMITED]``)."""
    ones = (1,) * rank
    return (sel_start,) + (0,) * (rank - 1), ones, ones, (U, *width)


def _source(path: Path, rows: int, *, name: str = "d", width: int = 4, offset: int = 0,
            chunks: tuple[int, ...] = (1, 4), fill: int = 0, **kw: Any) -> None:  # fmt: skip
    with h5py.File(path, "a") as f:
        data = np.arange(rows * width, dtype="<i4").reshape(rows, width) + offset
        f.create_dataset(name, data=data, maxshape=(None, width), chunks=chunks,
                         fillvalue=fill, **kw)  # fmt: skip


def _vds(path: Path, mappings: list[tuple[Sel, str, str, Sel, tuple[int, ...]]], *,
         shape: tuple[int, ...] = (0, 4), fill: int = -9, dtype: Any = h5py.h5t.STD_I32LE,
         name: str = "v") -> Path:  # fmt: skip
    """A VDS from (virtual selection, source file, source dataset, source selection, source
    dataspace shape at mapping time) with the low-level API, as HDF5's C tests write them."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_fill_value(np.array(fill, "<i4"))
    for vsel, file, dset, ssel, sshape in mappings:
        dcpl.set_virtual(_space(shape, vsel), file.encode(), dset.encode(), _space(sshape, ssel))
    with h5py.File(path, "a") as f:
        h5py.h5d.create(f.id, name.encode(), dtype, _space(shape, None), dcpl=dcpl)
    return path


def _assert_every_reader(refs: GranuleRefs, path: Path, tmp_path: Path, name: str = "v") -> None:
    """Shape and values equal h5py's through plain zarr, ``read_arrays`` and xarray (our engine
    and engine="zarr" over the JSON and the Parquet sidecars); ``verify`` passes."""
    assert name in refs.arrays, [s.reason for s in refs.skipped]
    assert_refs_match_h5py(refs, path)
    with h5py.File(path) as h5:
        want = h5[name][()]
    assert refs.arrays[name].meta.shape == want.shape
    sidecars = {
        "json": write_json(refs, tmp_path / f"{path.name}.json"),
        "parquet": write_parquet(refs, tmp_path / f"{path.name}.parq"),
    }
    for fmt, sidecar in sidecars.items():
        np.testing.assert_array_equal(read_arrays(sidecar, [name])[name], want, err_msg=fmt)
        so = {"fo": sidecar, "remote_protocol": "file"}
        plain = xr.open_dataset("reference://", engine="zarr", mask_and_scale=False,
                                backend_kwargs={"storage_options": so})  # fmt: skip
        np.testing.assert_array_equal(plain[name].values, want, err_msg=f"zarr {fmt}")
        ours = xr.open_dataset(sidecar, engine="h5sidecar", mask_and_scale=False)
        np.testing.assert_array_equal(ours[name].values, want, err_msg=f"h5sidecar {fmt}")
        report = verify_refs(sidecar, sample=0)
        assert report.ok, [v for v in report.variables if v.status != "ok"]


def _skip_reason(refs: GranuleRefs, name: str = "v") -> str:
    assert name not in refs.arrays, "indexed instead of skipped"
    reasons = {s.path: s.reason for s in refs.skipped if s.kind == "virtual_dataset"}
    return reasons[name]


def test_hdf5_use_case_1_sources_of_different_lengths(tmp_path: Path) -> None:
    """The form of ``1_vds.h5``: six sources stacked along dimension 1, each an unlimited
    selection along dimension 0; lengths differ (one is empty): the extent is the longest, the
    rows a source lacks read as the VDS fill value."""
    path = _use_case_1(tmp_path, [5, 3, 0, 6, 2, 5], heights=[3] * 6, compress=[True] * 6)
    refs = index_granule(str(path))
    with h5py.File(path) as h5:
        assert h5["v"].shape == (6, 18, 8)
    assert refs.arrays["v"].status == "virtual" and refs.arrays["v"].meta.chunks == (1, 3, 8)
    _assert_every_reader(refs, path, tmp_path)


def test_hdf5_use_case_1_as_written_is_skipped_with_the_reason(tmp_path: Path) -> None:
    """HDF5's own file: sources 2 and 4 planes high, every other one compressed.  No single
    chunk grid holds them: skipped, saying why (it was an empty array with status virtual)."""
    path = _use_case_1(tmp_path, [5] * 6, heights=[2, 4] * 3, compress=[False, True] * 3)
    refs = index_granule(str(path))
    assert "the source datasets differ in" in _skip_reason(refs)


def _use_case_1(tmp_path: Path, lengths: list[int], heights: list[int],
                compress: list[bool]) -> Path:  # fmt: skip
    """HDF5's VDS use case 1 (``UC_1_one_dim_gen.c``): 3-D sources ``1_a.h5`` ... of planes
    (n, height, 8), chunked by plane, stacked along dimension 1 with unlimited selections."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_fill_value(np.array(-9, "<i4"))
    total = sum(heights)
    vspace = h5py.h5s.create_simple((0, total, 8), (U, total, 8))
    row = 0
    for i, (n, h, gz) in enumerate(zip(lengths, heights, compress, strict=True)):
        name = f"1_{'abcdef'[i]}.h5"
        with h5py.File(tmp_path / name, "w") as f:
            data = np.repeat(np.arange(n, dtype="<i4")[:, None, None] + 10 * (i + 1), h, 1)
            f.create_dataset("source_dset", data=np.repeat(data, 8, 2), maxshape=(None, h, 8),
                             chunks=(1, h, 8), fillvalue=-(i + 1),
                             compression="gzip" if gz else None)  # fmt: skip
        sspace = h5py.h5s.create_simple((n, h, 8), (U, h, 8))
        sspace.select_hyperslab((0, 0, 0), (U, h, 8))  # count (U, h, 8), blocks of 1, as in C
        vspace.select_hyperslab((0, row, 0), (U, h, 8))
        dcpl.set_virtual(vspace, name.encode(), b"/source_dset", sspace)
        row += h
    path = tmp_path / "1_vds.h5"
    with h5py.File(path, "w") as f:
        space = h5py.h5s.create_simple((0, total, 8), (U, total, 8))
        h5py.h5d.create(f.id, b"v", h5py.h5t.STD_I32LE, space, dcpl=dcpl)
    return path


def test_interleaved_frames_of_sources_of_different_lengths(tmp_path: Path) -> None:
    """The Percival form (h5py's own VDS test): row ``k + 4j`` from row ``j`` of source ``k``
    (an unlimited count of 1-row blocks, stride 4); the shortest source leaves fill behind."""
    mappings = []
    for k, n in enumerate([5, 5, 6, 4]):
        _source(tmp_path / f"raw{k}.h5", n, offset=100 * k)
        vsel = ((k, 0), (U, 1), (4, 1), (1, 4))
        mappings.append((vsel, f"raw{k}.h5", "d", _rows(0), (n, 4)))
    path = _vds(tmp_path / "percival.h5", mappings)
    refs = index_granule(str(path))
    with h5py.File(path) as h5:
        assert h5["v"].shape == (23, 4)  # source 2: 6 rows, the last at 2 + 5 * 4
    _assert_every_reader(refs, path, tmp_path)


def test_printf_source_names(tmp_path: Path) -> None:
    """``src_%b.h5``: block ``b`` (3 rows) from source file ``b`` until the first missing one;
    a source shorter than its block reads its own fill value beyond its end, as in HDF5.  And
    ``%b`` in the dataset name, sources inside the granule (``.``)."""
    for b, n in enumerate([3, 2, 3]):
        _source(tmp_path / f"src_{b}.h5", n, offset=100 * b, fill=-7)
    _source(tmp_path / "src_4.h5", 3)  # after the gap: HDF5 does not look that far
    frame = ((0, 0), (1, 1), (1, 1), (3, 4))
    vsel = ((0, 0), (U, 1), (3, 1), (3, 4))
    path = _vds(tmp_path / "printf.h5", [(vsel, "src_%b.h5", "d", frame, (3, 4))])
    for b in range(2):
        _source(path, 3, name=f"frame{b}", offset=10 * b)
    _vds(path, [(vsel, ".", "frame%b", None, (3, 4))], name="w")
    refs = index_granule(str(path))
    with h5py.File(path) as h5:
        assert h5["v"].shape == (9, 4) and h5["w"].shape == (6, 4)
    _assert_every_reader(refs, path, tmp_path)
    _assert_every_reader(refs, path, tmp_path, name="w")


def test_unlimited_count_of_blocks_from_an_unlimited_source(tmp_path: Path) -> None:
    """A ``MultiBlockSlice(count=UNLIMITED)`` mapping: 2-row blocks every 4 rows from two
    sources read whole (h5py's ``MultiBlockSlice`` refuses an unlimited count against the
    layout's current shape, so the low-level API writes it).  Chunks of 2 rows line up."""
    mappings = []
    for k, n in enumerate([6, 4]):
        _source(tmp_path / f"s{k}.h5", n, offset=100 * k, chunks=(2, 4))
        vsel = ((2 * k, 0), (U, 1), (4, 1), (2, 4))
        mappings.append((vsel, f"s{k}.h5", "d", _rows(0), (n, 4)))
    path = _vds(tmp_path / "mbs.h5", mappings)
    refs = index_granule(str(path))
    assert refs.arrays["v"].meta.chunks == (2, 4)
    _assert_every_reader(refs, path, tmp_path)


def test_a_block_ending_inside_a_chunk_before_the_edge_is_skipped(tmp_path: Path) -> None:
    """The same with a 5-row source: its last block is 1 row of a 2-row chunk, and the VDS goes
    on after it (the other source is longer): no chunk grid holds that, so skip, with why."""
    mappings = []
    for k, n in enumerate([5, 8]):
        _source(tmp_path / f"s{k}.h5", n, chunks=(2, 4))
        vsel = ((2 * k, 0), (U, 1), (4, 1), (2, 4))
        mappings.append((vsel, f"s{k}.h5", "d", _rows(0), (n, 4)))
    refs = index_granule(str(_vds(tmp_path / "odd.h5", mappings)))
    assert "do not line up with the source chunks (2, 4)" in _skip_reason(refs)


def test_extent_is_hdf5s_not_the_stored_one(tmp_path: Path) -> None:
    """HDF5 sets the extent along an unlimited dimension from the mappings, smaller than the
    stored one too; limited mappings keep what they need (``min_dims``), missing sources
    reach nothing, the source inside the granule counts."""
    _source(tmp_path / "a.h5", 3, offset=100)
    shrunk = _vds(tmp_path / "shrunk.h5", [(_rows(0), "a.h5", "d", _rows(0), (3, 4))],
                  shape=(10, 4))  # fmt: skip
    _source(tmp_path / "b.h5", 2, chunks=(1, 2))
    path = tmp_path / "mixed.h5"
    _source(path, 4, name="own", width=2, offset=50, chunks=(1, 2))
    cols = [((0, c), (1, 1), (1, 1), (U, 2)) for c in (0, 2)]
    _vds(path, [
        (cols[0], "b.h5", "d", cols[0], (2, 4)),
        (cols[1], "gone.h5", "d", cols[0], (2, 2)),
        (((0, 4), (1, 1), (1, 1), (4, 2)), ".", "own", None, (4, 2)),
    ], shape=(4, 6))  # fmt: skip
    for p, want in ((shrunk, (3, 4)), (path, (4, 6))):
        with h5py.File(p) as h5:
            assert h5["v"].shape == want
        _assert_every_reader(index_granule(str(p)), p, tmp_path)


def test_empty_sources_give_hdf5s_empty_extent(tmp_path: Path) -> None:
    """Sources that exist and hold no rows yet: HDF5 gives the VDS no rows either, so an
    empty array is the right answer here (the sources are found; nothing is lost)."""
    _source(tmp_path / "e.h5", 0)
    path = _vds(tmp_path / "empty.h5", [(_rows(0), "e.h5", "d", _rows(0), (0, 4))])
    refs = index_granule(str(path))
    with h5py.File(path) as h5:
        assert h5["v"].shape == refs.arrays["v"].meta.shape == (0, 4)
    assert "without elements" in refs.arrays["v"].note


@pytest.mark.parametrize(
    ("second", "reason"),
    [
        ({"dtype": "<i8"}, "the source datasets differ in dtype"),
        ({"fill": -5}, ""),  # another fill value: its unwritten chunks stored inline
        ({"chunks": (2, 2)}, "the source datasets differ in chunk shape"),
    ],
)
def test_sources_that_differ(tmp_path: Path, second: dict[str, Any], reason: str) -> None:
    """Two stacked unlimited sources, the second of another dtype, fill value or chunk shape."""
    _source(tmp_path / "a.h5", 4, chunks=(1, 2))
    with h5py.File(tmp_path / "b.h5", "w") as f:
        d = f.create_dataset("d", shape=(6, 4), maxshape=(None, 4),
                             dtype=second.get("dtype", "<i4"), chunks=second.get("chunks", (1, 2)),
                             fillvalue=second.get("fill", 0))  # fmt: skip
        d[:2] = 7  # rows 2.. are unwritten chunks: the source's fill value
    cols = ((0, 0), (1, 1), (1, 1), (U, 2))
    right = ((0, 2), (1, 1), (1, 1), (U, 2))
    path = _vds(tmp_path / "v.h5", [
        (cols, "a.h5", "d", cols, (4, 4)), (right, "b.h5", "d", right, (6, 4)),
    ])  # fmt: skip
    refs = index_granule(str(path))
    if reason:
        assert reason in _skip_reason(refs)
    else:
        _assert_every_reader(refs, path, tmp_path)


def test_a_whole_source_that_grew_since_the_mapping_is_skipped(tmp_path: Path) -> None:
    """A limited mapping that takes a source whole (``ALL``) after the source grew: HDF5
    refuses to read the VDS (the element counts differ), so no values to give: skip, saying so."""
    _source(tmp_path / "g.h5", 5)
    path = _vds(tmp_path / "grown.h5", [(None, "g.h5", "d", None, (3, 4))], shape=(3, 4))
    with h5py.File(path) as h5, pytest.raises(OSError, match="elements"):
        h5["v"][()]
    reason = _skip_reason(index_granule(str(path)))
    assert "has the extent (5, 4), not the (3, 4) its mapping takes whole" in reason


def test_overlapping_mappings(tmp_path: Path) -> None:
    """Mappings over the same rows: the last one wins where they cover everything, as HDF5
    reads them in order; where rows are left unmapped HDF5 may leave them unfilled (their values
    are not defined), so the VDS is skipped."""
    _source(tmp_path / "a.h5", 4, offset=100)
    _source(tmp_path / "b.h5", 3, offset=200)
    both = [(_rows(0), f"{n}.h5", "d", _rows(0), (3, 4)) for n in "ab"]
    covered = _vds(tmp_path / "covered.h5", both)
    _assert_every_reader(index_granule(str(covered)), covered, tmp_path)
    gap = _vds(tmp_path / "gap.h5", [(_rows(2), f"{n}.h5", "d", _rows(0), (3, 4)) for n in "ab"])
    assert "mappings overlap and leave elements unmapped" in _skip_reason(index_granule(str(gap)))
