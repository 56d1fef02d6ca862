"""Read-ahead of small arrays (``ReadSettings.prefetch_bytes``): the loops users write first --
``v.load()`` per variable, ``Dataset.load()``, ``DataTree.load()`` -- cost a few batches, not a
round trip per variable.  Requests are the fetcher's counters (local files: one ``pread`` per
request); every value is compared with h5py."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.errors import ChunkDecodeError
from h5sidecar.read import SidecarStore
from h5sidecar.read.native._prefetch import SMALL_FRACTION, decoded_nbytes, is_whole, is_whole_key
from h5sidecar.read.native._selection import chunk_selection
from h5sidecar.references import ArrayRefs, ChunkManifest, GranuleRefs
from h5sidecar.settings import ReadSettings, from_env

RAW = {"mask_and_scale": False, "decode_times": False}
GROUP = "gt1l/heights"


def _store(refs: GranuleRefs, prefetch_bytes: int) -> SidecarStore:
    return SidecarStore(refs, settings=ReadSettings(prefetch_bytes=prefetch_bytes))


def _check_h5py(h5: Any, group: str, ds: xr.Dataset) -> int:
    """Every numeric data variable of ``ds`` equals h5py's; returns how many were compared."""
    n = 0
    for name, v in ds.data_vars.items():
        if v.dtype.kind in "biuf":
            np.testing.assert_array_equal(v.values, h5[f"{group}/{name}".strip("/")][()])
            n += 1
    return n


def _loop_tree(refs: GranuleRefs, prefetch_bytes: int, atl03_h5: Path) -> tuple[int, int]:
    """The loop over every group's variables; returns (requests, variables compared)."""
    store = _store(refs, prefetch_bytes)
    tree = h5sidecar.open_datatree(store, chunks=None, **RAW)
    before = store.stats["requests"]
    for node in tree.subtree:
        for v in node.dataset.data_vars.values():
            v.load()
    requests = store.stats["requests"] - before
    with h5py.File(atl03_h5) as f:
        compared = sum(_check_h5py(f, node.path.strip("/"), node.dataset)
                       for node in tree.subtree)
    return requests, compared


def test_per_variable_loop_over_a_tree_takes_few_requests(atl03_refs: GranuleRefs,
                                                          atl03_h5: Path) -> None:
    off, compared_off = _loop_tree(atl03_refs, 0, atl03_h5)
    on, compared_on = _loop_tree(atl03_refs, 64 * 2**20, atl03_h5)
    assert compared_on == compared_off > 500
    assert off > 300  # one round trip per variable without read-ahead
    assert on <= 10, on  # the first small variable alone, then one coalesced batch


def test_dataset_load_of_one_group_reads_ahead_only_in_that_group(atl03_refs: GranuleRefs,
                                                                  atl03_h5: Path) -> None:
    store = _store(atl03_refs, 64 * 2**20)
    ds = xr.open_dataset(store, engine="h5sidecar", group=GROUP, chunks=None, **RAW)
    before = store.stats["requests"]
    ds.load()  # xarray loads the variables one by one
    assert store.stats["requests"] - before <= 3
    assert {p.rpartition("/")[0] for p in store.native.opened} == {GROUP}
    with h5py.File(atl03_h5) as f:
        assert _check_h5py(f, GROUP, ds) > 5


def test_large_arrays_stay_lazy_and_memory_is_bounded(atl03_refs: GranuleRefs) -> None:
    sizes = {p: decoded_nbytes(a) for p, a in atl03_refs.arrays.items()
             if p.startswith(GROUP + "/")}
    probe = xr.open_dataset(_store(atl03_refs, 0), engine="h5sidecar", group=GROUP,
                            chunks=None, **RAW)
    biggest = max(sizes[f"{GROUP}/{n}"] for n in probe.data_vars)
    limit = (biggest - 1) * SMALL_FRACTION  # the widest photon variables are large
    store = _store(atl03_refs, limit)
    ds = xr.open_dataset(store, engine="h5sidecar", group=GROUP, chunks=None, **RAW)
    small = [n for n in ds.data_vars if sizes[f"{GROUP}/{n}"] <= limit // SMALL_FRACTION]
    large = [n for n in ds.data_vars if sizes[f"{GROUP}/{n}"] > limit // SMALL_FRACTION]
    assert len(small) >= 3 and large
    ds[small[0]].load()
    ds[small[1]].load()  # the second small read brings its neighbours
    held = store.native._prefetched
    assert held and sum(a.nbytes for a in held.values()) <= limit
    assert not {f"{GROUP}/{n}" for n in large} & held.keys()
    before = store.stats["requests"]
    for name in small[2:]:
        if f"{GROUP}/{name}" in held:
            ds[name].load()
    assert store.stats["requests"] == before  # served from memory, handed out once
    assert not any(f"{GROUP}/{n}" in held for n in small[2:])


def test_one_read_at_a_time_never_reads_ahead_once(small_refs: GranuleRefs) -> None:
    """A single read of a small array (a user reading one variable) reads nothing else."""
    store = _store(small_refs, 64 * 2**20)
    ds = xr.open_dataset(store, engine="h5sidecar", group=GROUP, chunks=None, **RAW)
    ds["h_ph"].load()
    assert store.native._prefetched == {}


def _shifted(refs: GranuleRefs, var: str, by: int) -> GranuleRefs:
    arr = refs.arrays[var]
    m = arr.manifest
    moved = ChunkManifest.from_arrays(urls=m.urls, codes=m.codes, offsets=m.offsets + by,
                                      lengths=m.lengths, inline=m.inline)
    arrays = dict(refs.arrays)
    arrays[var] = ArrayRefs(path=arr.path, meta=arr.meta, manifest=moved)
    return dataclasses.replace(refs, arrays=arrays)


def test_a_neighbour_that_fails_never_fails_the_read(small_refs: GranuleRefs,
                                                     small_h5: Path) -> None:
    bad = _shifted(small_refs, f"{GROUP}/quality_ph", 3)  # gzip: not a zlib stream any more
    store = _store(bad, 64 * 2**20)
    ds = xr.open_dataset(store, engine="h5sidecar", group=GROUP, chunks=None, **RAW)
    ds["h_ph"].load()
    ds["lat_ph"].load()  # brings quality_ph along, which fails to decode
    with h5py.File(small_h5) as f:
        np.testing.assert_array_equal(ds["lat_ph"].values, f[f"{GROUP}/lat_ph"][()])
        np.testing.assert_array_equal(ds["h_ph"].values, f[f"{GROUP}/h_ph"][()])
    with pytest.raises(ChunkDecodeError, match="quality_ph"):
        ds["quality_ph"].load()


def test_prefetch_bytes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H5SIDECAR_PREFETCH_BYTES", "0")
    assert from_env(ReadSettings).prefetch_bytes == 0
    assert ReadSettings().prefetch_bytes > 0


def test_batch_load_decodes_every_array_once(atl03_refs: GranuleRefs, atl03_h5: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``h5sidecar.load(tree)`` asks for every array in one turn: the arrays a read-ahead
    already brings are taken from it, not decoded a second time in the same batch."""
    from h5sidecar.read.native import _batch_fetch as _batch

    decoded: list[str] = []

    class Counting(_batch._Target):
        def __init__(self, path: str, *args: Any) -> None:
            decoded.append(path)
            super().__init__(path, *args)

    monkeypatch.setattr(_batch, "_Target", Counting)
    store = _store(atl03_refs, 64 * 2**20)
    tree = h5sidecar.open_datatree(store, chunks=None, create_default_indexes=False, **RAW)
    h5sidecar.load(tree)
    assert decoded and len(decoded) == len(set(decoded)), len(decoded) - len(set(decoded))
    with h5py.File(atl03_h5) as f:
        assert sum(_check_h5py(f, node.path.strip("/"), node.dataset)
                   for node in tree.subtree) > 500


def test_a_loop_over_large_arrays_reads_the_next_ones_together(
        atl03_refs: GranuleRefs, atl03_h5: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a second large array is read whole in a loop, the arrays opened after it in its
    group come in the same batch, up to ``prefetch_bytes``: fewer round trips than arrays."""
    from h5sidecar.read.native import _batch_reader as _batch

    batches: list[list[str]] = []
    serve = _batch.NativeReader._read_batch

    async def counting(self: Any, prepared: Any) -> Any:
        batches.append([p for p, _, _ in prepared])
        return await serve(self, prepared)

    monkeypatch.setattr(_batch.NativeReader, "_read_batch", counting)
    sizes = {p: decoded_nbytes(a) for p, a in atl03_refs.arrays.items()
             if p.startswith(GROUP + "/")}
    limit = 3 * max(sizes.values())  # every photon array is large (> limit / 8), 3 fit
    store = _store(atl03_refs, limit)
    ds = xr.open_dataset(store, engine="h5sidecar", group=GROUP, chunks=None,
                         create_default_indexes=False, **RAW)
    large = [n for n, v in ds.variables.items() if sizes[f"{GROUP}/{n}"] > limit // SMALL_FRACTION]
    assert len(large) >= 6
    ds.load()
    assert len(batches) < len(large) - 2, batches
    assert sum(a.nbytes for a in store.native._prefetched.values()) <= 2 * limit
    with h5py.File(atl03_h5) as f:
        assert _check_h5py(f, GROUP, ds) >= len(large) - 1


def test_a_loop_over_small_arrays_refills_before_it_runs_out(atl03_refs: GranuleRefs,
                                                              atl03_h5: Path) -> None:
    """A loop over variables whose small arrays fill the read-ahead budget several times over
    gets the next read-ahead while it takes the arrays held (a quarter of the budget free is
    enough), so it waits for no read of its own after the first two; held and in-flight
    arrays together never exceed the budget when a small array's read plans the read-ahead,
    nor twice the budget when a run of larger arrays does (their own budget: see
    ``follow_on``); values equal h5py's."""
    from h5sidecar.read.native._batch_reader import NativeReader
    from h5sidecar.read.native._prefetch import LARGE_RUN, is_small

    tree_arrays = [a for a in atl03_refs.arrays.values() if a.meta.shape]
    small = sorted(decoded_nbytes(a) for a in tree_arrays)
    limit = max(sum(small) // 6, small[-1] * SMALL_FRACTION // 4)
    assert sum(decoded_nbytes(a) for a in tree_arrays if is_small(a, limit)) > 2 * limit
    store = _store(atl03_refs, limit)
    reader = store.native
    own_reads, peak, peak_all = [], [0], [0]
    enqueue = NativeReader._enqueue

    def watched(self: Any, prepared: list[Any], *, optional: bool) -> Any:
        if not optional:
            own_reads.extend(p for p, _, _ in prepared)
        fut = enqueue(self, prepared, optional=optional)
        inflight = sum(decoded_nbytes(a) for _, a, _ in prepared) if optional else 0
        held = sum(a.nbytes for a in list(self._prefetched.values()))
        if optional and self._large_reads < LARGE_RUN:  # a small array's read-ahead
            peak[0] = max(peak[0], held + inflight)
        # in a run of larger arrays (follow_on) a read-ahead has a budget of its own
        peak_all[0] = max(peak_all[0], held + inflight)
        return fut

    tree = h5sidecar.open_datatree(store, chunks=None, **RAW)
    mp = pytest.MonkeyPatch()
    mp.setattr(NativeReader, "_enqueue", watched)
    try:
        for node in tree.subtree:
            for v in node.dataset.data_vars.values():
                v.load()
    finally:
        mp.undo()
    assert reader._refilling
    small_own = [p for p in own_reads if is_small(atl03_refs.arrays[p], limit)]
    assert len(small_own) <= 3, small_own  # the first reads only: then read-ahead serves all
    assert 0 < peak[0] <= limit
    assert peak_all[0] <= 2 * limit
    with h5py.File(atl03_h5) as f:
        assert sum(_check_h5py(f, node.path.strip("/"), node.dataset)
                   for node in tree.subtree) > 500


def test_a_read_ahead_in_flight_counts_against_the_budget(atl03_refs: GranuleRefs) -> None:
    """A loop's own read plans the next read-ahead while a refill is still reading: the arrays
    in flight count against ``prefetch_bytes`` as held ones do, so held, in flight and the new
    read-ahead together stay within it (under load the two used to overlap and pass it)."""
    from h5sidecar.read.native._prefetch import (
        inflight_bytes,
        is_dimension_coordinate,
        is_small,
        plan_ahead,
    )
    from h5sidecar.read.native._selection import chunk_selection

    tree_arrays = [a for a in atl03_refs.arrays.values() if a.meta.shape]
    small_sizes = sorted(decoded_nbytes(a) for a in tree_arrays)
    limit = max(sum(small_sizes) // 6, small_sizes[-1] * SMALL_FRACTION // 4)
    store = _store(atl03_refs, limit)
    h5sidecar.open_datatree(store, chunks=None, **RAW)  # opens every array through the reader
    reader = store.native
    small = [p for p in reader.opened if is_small(atl03_refs.arrays[p], limit)
             and atl03_refs.arrays[p].meta.shape
             and not is_dimension_coordinate(atl03_refs.arrays[p])]  # fmt: skip
    # a refill in flight: the last small arrays, about three quarters of the budget (a refill
    # fills the budget; the loop has since taken what was held)
    in_flight, total = [], 0
    for p in reversed(small):
        if total + decoded_nbytes(atl03_refs.arrays[p]) > limit * 3 // 4:
            break
        in_flight.append(p)
        total += decoded_nbytes(atl03_refs.arrays[p])
    reader._ahead_inflight.update(dict.fromkeys(in_flight, object()))
    reader._ahead_done.update(in_flight)  # as a planned read-ahead is
    assert inflight_bytes(reader) == total > limit // 2

    def whole(p: str) -> tuple[str, ArrayRefs, Any]:
        arr = atl03_refs.arrays[p]
        key = tuple(slice(None) for _ in arr.meta.shape)
        return p, arr, chunk_selection(arr.meta.shape, arr.meta.chunks, key)

    assert plan_ahead(reader, [whole(small[0])]) == []  # a first read is not a loop yet
    planned = plan_ahead(reader, [whole(small[1])])  # the second would read ahead
    assert not {p for p, _, _ in planned} & set(in_flight)
    held = sum(a.nbytes for a in reader._prefetched.values())
    new = sum(decoded_nbytes(a) for _, a, _ in planned)
    assert held + total + new <= limit
    reader._ahead_inflight.clear()


def test_whole_key_agrees_with_the_whole_selection() -> None:
    """Held arrays are handed out on the key alone (no chunk grid built): for every key of
    ints and slices, the answer is the one of the selection it makes."""
    keys = [slice(None), slice(0, None, 1), slice(0, 5), slice(1, None), slice(None, None, -1),
            slice(None, None, 2), slice(-100, 100), 0, -1]
    checked = 0
    for shape in [(), (5,), (1,), (0,), (5, 3), (4, 0)]:
        for key in itertools.product(keys, repeat=len(shape)):
            try:
                sel = chunk_selection(shape, (2,) * len(shape), key)
            except IndexError:
                continue
            assert is_whole_key(key, shape) == is_whole(sel, shape), (shape, key)
            checked += 1
    assert checked > 100


def test_not_read_yet_follows_what_is_opened_and_read(small_refs: GranuleRefs) -> None:
    """The read-ahead candidates (kept from call to call, so a loop over a thousand arrays
    does not rescan them all at every array) are always the opened arrays not read yet, in
    opening order, as arrays are opened and read between calls."""
    from h5sidecar.read.native._prefetch import not_read_yet

    reader = _store(small_refs, 1 << 20).native
    paths = sorted(small_refs.arrays)
    assert len(paths) >= 8 and not_read_yet(reader) == []
    steps = [(paths[:4], []), ([], paths[1:2]), ([], []), (paths[4:8], paths[4:5]),
             (paths[2:3], paths[:1]), ([], paths[:8])]
    for opened, read in steps:
        reader.opened.update(dict.fromkeys(opened))
        reader._ahead_done.update(read)
        want = [p for p in reader.opened if p not in reader._ahead_done]
        assert not_read_yet(reader) == want
