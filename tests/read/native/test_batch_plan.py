"""The batch plan made of arrays (:mod:`h5sidecar.read.native._batch_plan`): one row per stored chunk,
groups of many small chunks decoded per pool task, chunks decoded in place at precomputed
offsets, others copied; values always equal h5py's."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from h5sidecar.indexer import index_granule
from h5sidecar.read import SidecarStore
from h5sidecar.read.native import _batch_plan
from h5sidecar.references import GranuleRefs

ALL = slice(None)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GranuleRefs]:
    """Many small chunks of every kind the batch reader meets in one granule: gzip at several
    levels, shuffle + gzip, plain chunked and contiguous arrays, big-endian values, 2-D chunks
    whose region in the output is or is not contiguous, partial edge chunks and chunks never
    written (the fill value)."""
    path = tmp_path_factory.mktemp("plan") / "mixed.h5"
    rng = np.random.default_rng(24)
    with h5py.File(path, "w") as f:
        for level in (1, 5, 9):  # 2,000 values in chunks of 7: many small chunks, an edge one
            f.create_dataset(f"gz{level}", data=rng.integers(0, 50, 2_000).astype("<i4"),
                             chunks=(7,), compression="gzip", compression_opts=level)
        f.create_dataset("shuf", data=rng.normal(size=1_003), chunks=(10,),
                         compression="gzip", shuffle=True)
        f.create_dataset("plain", data=rng.normal(size=1_001).astype("<f4"), chunks=(10,))
        f.create_dataset("contig", data=np.arange(333, dtype="<i2"))
        f.create_dataset("big", data=rng.normal(size=205).astype(">f8"), chunks=(10,),
                         compression="gzip")
        grid = rng.normal(size=(23, 17)).astype("<f4")
        f.create_dataset("rows", data=grid, chunks=(1, 17), compression="gzip")  # contiguous
        f.create_dataset("bands", data=grid, chunks=(4, 17), compression="gzip")  # contiguous
        f.create_dataset("tiles", data=grid, chunks=(4, 5), compression="gzip")  # not
        sparse = f.create_dataset("sparse", shape=(95,), chunks=(10,), dtype="<i8",
                                  fillvalue=-9, compression="gzip")
        sparse[0:10] = 1
        sparse[40:55] = 2  # chunks 4 and 5; 1-3 and 6-9 never written
        f.create_dataset("scalar", data=np.float64(3.5))
    return path, index_granule(str(path))


def _h5(path: Path, name: str, key: Any) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f[name][()] if f[name].shape == () else f[name][key]


KEYS = [None, (slice(3, 1_000),), (slice(5, 17), slice(2, 16)), (slice(None, None, 3),)]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_one_batch_of_mixed_codecs_equals_h5py(mixed: tuple[Path, GranuleRefs], key: Any) -> None:
    path, refs = mixed
    reader = SidecarStore(refs, chunk_cache=None).native
    items = []
    for name, arr in refs.arrays.items():
        ndim = len(arr.meta.shape)
        k = (ALL,) * ndim if key is None or len(key) != ndim else key
        items.append((name, k))
    got = reader.read_sync(items)
    for (name, k), value in zip(items, got, strict=True):
        want = _h5(path, name, k)
        assert value.dtype == want.dtype.newbyteorder("="), name
        np.testing.assert_array_equal(value, want, err_msg=name)


def test_many_small_chunks_share_a_decode_task(mixed: tuple[Path, GranuleRefs],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of hundreds of small chunks of mixed codecs is decoded in a few pool tasks
    (one per fetch group, each covering many chunks), never one task per chunk."""
    path, refs = mixed
    calls: list[tuple[int, int]] = []
    real = _batch_plan.decode_span

    def counted(plan: Any, lo: int, hi: int, got: Any) -> None:
        calls.append((lo, hi))
        real(plan, lo, hi, got)

    monkeypatch.setattr("h5sidecar.read.native._batch_fetch._decode_span", counted)
    reader = SidecarStore(refs, chunk_cache=None).native
    names = [n for n in refs.arrays if refs.arrays[n].meta.shape]
    got = reader.read_sync([(n, (ALL,) * len(refs.arrays[n].meta.shape)) for n in names])
    stored = sum(int((refs.arrays[n].manifest.codes >= 0).sum()) for n in names)
    assert stored > 900
    assert len(calls) <= 4, calls  # a batch of 2 MiB or less is one group
    assert sum(hi - lo for lo, hi in calls) == stored  # every stored chunk once
    for n, value in zip(names, got, strict=True):
        np.testing.assert_array_equal(value, _h5(path, n, ALL), err_msg=n)


def test_a_chunk_two_selections_want_is_planned_once(mixed: tuple[Path, GranuleRefs]) -> None:
    path, refs = mixed
    reader = SidecarStore(refs, chunk_cache=None).native
    keys = [(slice(0, 60),), (slice(50, 100),), (slice(55, 56),), (ALL,)]
    got = reader.read_sync([("gz5", k) for k in keys] + [("sparse", (slice(30, 60),))] * 2)
    manifest = refs.arrays["gz5"].manifest
    sparse = refs.arrays["sparse"].manifest.lengths.reshape(-1)[4:6]
    used = reader.fetcher.stats.snapshot()["bytes_used"]  # ranges asked, repeats counted
    assert used == int(manifest.lengths.sum()) + int(sparse.sum())
    for k, value in zip(keys, got[:4], strict=True):
        np.testing.assert_array_equal(value, _h5(path, "gz5", k))
    for value in got[-2:]:
        np.testing.assert_array_equal(value, _h5(path, "sparse", (slice(30, 60),)))


def test_in_place_offsets_only_for_contiguous_regions(mixed: tuple[Path, GranuleRefs]) -> None:
    """Whole chunks inside the box are decoded at a precomputed byte offset of the output
    when their region is contiguous and in stored byte order; edge chunks, tiles of a grid
    and big-endian values are decoded apart and copied."""
    _, refs = mixed
    from h5sidecar.read.native._batch_parts import Target
    from h5sidecar.read.native._selection import chunk_selection

    reader = SidecarStore(refs, chunk_cache=None).native
    names = ["gz1", "rows", "bands", "tiles", "big"]
    targets = []
    for n in names:
        meta = refs.arrays[n].meta
        sel = chunk_selection(meta.shape, meta.chunks, (ALL,) * len(meta.shape))
        targets.append(Target(n, reader.codec(n), sel))  # type: ignore[arg-type]
    mans = [refs.arrays[n].manifest for n in names]
    plan = _batch_plan.plan_batch(
        targets, mans, [refs.arrays[n].meta.shape for n in names],
        [np.flatnonzero(m.codes.reshape(-1) >= 0) for m in mans],
        group_min=2**21, groups=32, max_request=2**24, max_gap=0, subchunk_fraction=0.5)  # fmt: skip
    by = {n: plan.dest[plan.target == k] for k, n in enumerate(names)}
    assert (by["gz1"] >= 0).sum() == 2_000 // 7  # the edge chunk is copied
    assert sorted(by["gz1"][by["gz1"] >= 0].tolist()) == [i * 7 * 4 for i in range(2_000 // 7)]
    assert (by["rows"] >= 0).all() and sorted(by["rows"].tolist()) == [r * 17 * 4 for r in range(23)]
    assert (by["bands"] >= 0).sum() == 5  # 23 rows: the sixth band is an edge
    assert (by["tiles"] < 0).all() and (by["big"] < 0).all()
    assert np.all(np.diff(plan.offset[plan.url == 0]) > 0)  # file order


def test_a_whole_granule_batch_holds_no_object_per_chunk(tmp_path: Path) -> None:
    """Reading 30,000 small chunks in one batch leaves the garbage collector's young
    generation almost idle: no record, grid tuple or view is held per chunk while the batch
    is in flight (those made a whole-granule read run a full collection)."""
    path = tmp_path / "many.h5"
    with h5py.File(path, "w") as f:
        for i in range(3):
            f.create_dataset(f"v{i}", data=np.arange(100_000, dtype="<i4") % 97, chunks=(10,),
                             compression="gzip", compression_opts=1)
    refs = index_granule(str(path))
    reader = SidecarStore(refs, chunk_cache=None).native
    items = [(f"v{i}", (ALL,)) for i in range(3)]
    reader.read_sync(items)  # warm: codecs, pools, loop
    collections = [0]

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collections[0] += 1

    gc.collect()
    gc.callbacks.append(count)
    try:
        got = reader.read_sync(items)
    finally:
        gc.callbacks.remove(count)
    # one long-lived object per chunk alone is 30,000 / 700 (gen-0 threshold) = 43 collections
    assert collections[0] < 15, collections[0]
    for (name, _), value in zip(items, got, strict=True):
        np.testing.assert_array_equal(value, _h5(path, name, ALL))
