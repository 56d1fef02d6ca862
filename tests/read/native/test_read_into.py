"""``NativeReader.read_into``: a batch decoded into arrays the caller owns (what the gridded
analysis reuses block after block); values compared with h5py."""

from __future__ import annotations

from pathlib import Path

import fsspec.asyn
import numpy as np
import pytest

from h5sidecar.read import SidecarStore
from h5sidecar.read.native._batch_reader import out_dtype
from h5sidecar.references import GranuleRefs
from tests._granules import read_h5

VARS = ("gt1l/heights/h_ph", "gt1l/heights/lat_ph")


def _read_into(store: SidecarStore, items: list, outs: list) -> list[np.ndarray]:
    return fsspec.asyn.sync(fsspec.asyn.get_loop(), store.native.read_into, items, outs)  # type: ignore[no-any-return]


def test_blocks_decoded_into_one_reused_buffer_equal_h5py(small_refs: GranuleRefs,
                                                          small_h5: Path) -> None:
    store = SidecarStore(small_refs)
    dtypes = [out_dtype(store.native.codec(v).dtype) for v in VARS]
    buf = np.full(64 * 2**10, 0xAB, dtype=np.uint8)  # garbage the reads must overwrite
    n = small_refs.arrays[VARS[0]].meta.shape[0]
    # whole chunks, chunks cut at both ends, the edge chunk: each into the same bytes
    for a, b in [(0, 2000), (1500, 3700), (999, 1001), (n - 1234, n)]:
        outs, offset = [], 0
        for dt in dtypes:
            outs.append(buf[offset : offset + (b - a) * dt.itemsize].view(dt))
            offset += -(-(b - a) * dt.itemsize // 64) * 64
        got = _read_into(store, [(v, (slice(a, b),)) for v in VARS], outs)
        for v, g, o in zip(VARS, got, outs, strict=True):
            np.testing.assert_array_equal(g, read_h5(small_h5, v)[a:b])
            assert np.shares_memory(g, o)


def test_output_arrays_that_do_not_fit_are_refused(small_refs: GranuleRefs) -> None:
    store = SidecarStore(small_refs)
    dt = out_dtype(store.native.codec(VARS[0]).dtype)
    item = [(VARS[0], (slice(0, 100),))]
    with pytest.raises(ValueError, match="shape"):
        _read_into(store, item, [np.empty(99, dt)])
    wrong = np.dtype("f8" if dt != np.float64 else "f4")
    with pytest.raises(ValueError, match=f"got {wrong} "):
        _read_into(store, item, [np.empty(100, wrong)])
    with pytest.raises(ValueError, match="contiguous"):
        _read_into(store, item, [np.empty(200, dt)[::2]])
    with pytest.raises(ValueError, match="1 selections but 2 output arrays"):
        _read_into(store, item, [np.empty(100, dt)] * 2)
