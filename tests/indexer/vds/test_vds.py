"""Virtual datasets: sources mapped onto one chunk grid across files, or skipped with a reason."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from h5sidecar.indexer import index_granule
from tests.indexer._compare import assert_refs_match_h5py


def _source(path: Path, data: np.ndarray, **kwargs) -> None:  # type: ignore[no-untyped-def]
    with h5py.File(path, "w") as f:
        f.create_dataset("d", data=data, **kwargs)


def test_stacked_sources_in_other_files(make_h5, tmp_path: Path) -> None:
    frames = [(np.arange(12).reshape(3, 4) + 100 * i).astype("<i4") for i in range(3)]
    for i, frame in enumerate(frames[:2]):  # the third source file is absent: reads as fill
        _source(
            tmp_path / f"src{i}.h5", frame[None].repeat(2, 0), chunks=(1, 3, 4), compression="gzip"
        )
    layout = h5py.VirtualLayout(shape=(6, 3, 4), dtype="<i4")
    for i in range(3):
        layout[2 * i : 2 * i + 2] = h5py.VirtualSource(f"src{i}.h5", "d", shape=(2, 3, 4))
    path = make_h5(lambda f: f.create_virtual_dataset("v", layout, fillvalue=-9))
    refs = index_granule(str(path))
    arr = refs.arrays["v"]
    assert arr.manifest.urls == (str(tmp_path / "src0.h5"), str(tmp_path / "src1.h5"))
    assert arr.meta.chunks == (1, 3, 4) and [c["id"] for c in arr.meta.filters] == ["zlib"]
    # the absent source's chunks are stored as -9 (a null fill_value would read 0; issue 9)
    assert arr.manifest.n_stored == 4 and arr.manifest.n_inline == 2
    assert arr.meta.fill_value == -9
    assert "virtual dataset mapped onto 2 source file(s)" in arr.note
    assert_refs_match_h5py(refs, path)


def test_interleaved_unfiltered_frames_are_row_slabs(make_h5, tmp_path: Path) -> None:
    for j in range(2):
        _source(tmp_path / f"s{j}.h5", np.arange(4 * 6).reshape(4, 6) + 100 * j, chunks=(2, 6))
    layout = h5py.VirtualLayout(shape=(8, 6), dtype="i8")
    for j in range(2):
        layout[j::2] = h5py.VirtualSource(f"s{j}.h5", "d", shape=(4, 6))
    path = make_h5(lambda f: f.create_virtual_dataset("v", layout))
    refs = index_granule(str(path))
    arr = refs.arrays["v"]
    assert arr.meta.chunks == (1, 6)  # one row of a 2-row source chunk per Zarr chunk
    assert arr.manifest.n_stored == 8
    assert_refs_match_h5py(refs, path)


def test_empty_and_unmappable_virtual_datasets(make_h5, tmp_path: Path) -> None:
    _source(tmp_path / "s.h5", np.arange(10), chunks=(4,), compression="gzip")
    empty = h5py.VirtualLayout(shape=(0, 3), maxshape=(None, 3), dtype="f4")
    odd = h5py.VirtualLayout(shape=(10,), dtype="i8")
    odd[0:6] = h5py.VirtualSource("s.h5", "d", shape=(10,))[2:8]  # starts inside a chunk
    cast = h5py.VirtualLayout(shape=(10,), dtype="i2")  # HDF5 converts int64 -> int16
    cast[:] = h5py.VirtualSource("s.h5", "d", shape=(10,))

    def build(f: h5py.File) -> None:
        f.create_virtual_dataset("empty", empty)
        f.create_virtual_dataset("odd", odd)
        f.create_virtual_dataset("cast", cast)

    path = make_h5(build)
    refs = index_granule(str(path))
    assert refs.arrays["empty"].meta.shape == (0, 3)
    reasons = {s.path: s.reason for s in refs.skipped if s.kind == "virtual_dataset"}
    assert set(reasons) == {"odd", "cast"}
    assert "do not line up" in reasons["odd"] and "sources hold int64" in reasons["cast"]
    assert_refs_match_h5py(refs, path)


def _unlimited_vds(f: h5py.File, name: str, source: str) -> None:
    """A VDS repeating one-row blocks of ``source``'s ``d`` without limit (the form of the
    HDF5 test files ``3_1_vds.h5``): extent 0 in the file, computed from the source on open."""
    unlimited = h5py.h5s.UNLIMITED
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_fill_value(np.array(-1, "i8"))
    spaces = []
    for _ in range(2):
        space = h5py.h5s.create_simple((0, 4), (unlimited, 4))
        space.select_hyperslab((0, 0), (unlimited, 1), (1, 1), (1, 4))
        spaces.append(space)
    dcpl.set_virtual(spaces[0], source.encode(), b"d", spaces[1])
    extent = h5py.h5s.create_simple((0, 4), (unlimited, 4))
    h5py.h5d.create(f.id, name.encode(), h5py.h5t.STD_I64LE, extent, dcpl=dcpl)


def test_a_virtual_dataset_without_any_source_is_skipped_not_empty(
    make_h5, tmp_path: Path
) -> None:
    """Unlimited mappings of absent sources gave shape 0, no chunks, no reason (and fixed ones
    fill values only): both are skipped, saying which sources are missing; a VDS whose sources
    exist gets h5py's shape (computed from the sources) and its values."""
    _source(tmp_path / "here.h5", np.arange(12).reshape(3, 4), chunks=(1, 4), maxshape=(None, 4))
    fixed = h5py.VirtualLayout(shape=(3, 4), dtype="i8")
    fixed[:] = h5py.VirtualSource("gone.h5", "d", shape=(3, 4))

    def build(f: h5py.File) -> None:
        _unlimited_vds(f, "unlimited", "gone.h5")
        f.create_virtual_dataset("fixed", fixed, fillvalue=-1)
        _unlimited_vds(f, "found", "here.h5")

    path = make_h5(build)
    refs = index_granule(str(path))
    skipped = {s.path: s for s in refs.skipped}
    assert set(skipped) == {"unlimited", "fixed"}
    for s in skipped.values():
        assert s.kind == "virtual_dataset" and "gone.h5:d" in s.reason
        assert "none of its 1 source dataset(s) can be found" in s.reason
    with h5py.File(path) as h5:
        assert refs.arrays["found"].meta.shape == h5["found"].shape == (3, 4)
    assert refs.arrays["found"].manifest.n_stored == 3
    assert_refs_match_h5py(refs, path)
