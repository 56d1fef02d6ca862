"""The reader matrix's chunk sample (:func:`tests._matrix.chunk_sample`) keeps every edge chunk
and bounds what the sampled readers read."""

from __future__ import annotations

import numpy as np
import xarray as xr

from tests._matrix import chunk_sample, verdict


def _var(shape: tuple[int, ...], chunks: tuple[int, ...]) -> xr.DataArray:
    v = xr.DataArray(np.arange(np.prod(shape)).reshape(shape), dims=[f"d{i}" for i in range(len(shape))])
    v.encoding["chunks"] = chunks
    return v


def test_small_variables_are_compared_whole() -> None:
    assert chunk_sample(_var((200, 5), (1, 5)), 1000) is None
    assert chunk_sample(xr.DataArray(np.int8(3)), 1000) is None


def test_the_sample_keeps_the_edge_chunks_and_about_the_bound() -> None:
    v = _var((200, 5, 10), (1, 1, 1))  # 10,000 chunks of one element
    sel = chunk_sample(v, 1000)
    assert sel is not None and list(sel) == ["d0"]
    rows = sel["d0"]
    assert {0, 1, 198, 199} <= set(rows.tolist())
    chunks = len(rows) * 5 * 10
    assert 200 <= chunks <= 1200


def test_a_partial_last_chunk_is_sampled_whole() -> None:
    v = _var((10_007,), (7,))  # 1,430 chunks, the last of 4 elements
    rows = chunk_sample(v, 1000)["d0"]  # type: ignore[index]
    assert rows[-4:].tolist() == [10_003, 10_004, 10_005, 10_006]
    assert rows[:14].tolist() == list(range(14))


def test_a_difference_in_a_sampled_chunk_is_found() -> None:
    want = _var((200, 5, 10), (1, 1, 1))
    got = want.copy(data=want.values.copy())
    got.encoding["chunks"] = (1, 1, 1)
    got[199, 4, 9] += 1  # the last chunk, always sampled
    assert verdict(got, want, None, max_chunks=1000) == "differ"
    assert verdict(want.copy(), want, None, max_chunks=1000) == "equal"


def test_a_variable_over_the_whole_limit_keeps_its_windows() -> None:
    """A sample of whole chunks of a huge variable would be huge itself (250 chunks of 2**21
    elements: ~4 GB of row numbers): it is compared on its three windows instead."""
    import dask.array as da

    from tests._matrix import WHOLE_LIMIT, _windows

    n = 2**31 + 100
    v = xr.DataArray(da.zeros(n, dtype="u1", chunks=2**21), dims=["d0"])
    v.encoding["chunks"] = (2**21,)
    assert n > WHOLE_LIMIT and chunk_sample(v, 250) is None
    assert [w["d0"].stop - w["d0"].start for w in _windows(v)] == [4096, 4096, 4096]
