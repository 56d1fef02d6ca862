"""Virtual re-chunk geometry: which arrays qualify, the shapes chosen, and the byte runs of every
virtual chunk reassemble exactly the values of its box (edge and padded chunks included)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from h5sidecar.read.zarr._virtual_chunks import (
    MAX_RUNS,
    RechunkSpec,
    plain_array,
    virtual_chunk_shape,
    virtual_runs,
)
from h5sidecar.references import ArrayMeta


def meta(shape, chunks, dtype="<i2", **kw) -> ArrayMeta:  # type: ignore[no-untyped-def]
    return ArrayMeta(shape=shape, chunks=chunks, dtype=dtype, **kw)


def test_spec_parse() -> None:
    assert RechunkSpec.parse("auto", 65536) == RechunkSpec(target_bytes=65536)
    assert RechunkSpec.parse("64k", 1).target_bytes == 65536
    assert RechunkSpec.parse("1m", 1).target_bytes == 2**20
    assert RechunkSpec.parse("4096", 1).name == "4096"
    assert RechunkSpec.parse("1x0", 1) == RechunkSpec(shape=(1, 0))
    for bad in ("", "x", "64kb", "-1", "1x", "12", "2g", "1.5"):
        with pytest.raises(ValueError):
            RechunkSpec.parse(bad, 1)


def test_which_arrays_qualify() -> None:
    assert plain_array(meta((10, 4), (5, 4)))
    assert plain_array(meta((10,), (10,), ">f8"))
    assert not plain_array(meta((10,), (5,), compressor={"id": "zlib", "level": 1}))
    assert not plain_array(meta((10,), (5,), filters=({"id": "shuffle", "elementsize": 2},)))
    assert not plain_array(meta((), (), "<f4"))  # scalar: one element
    assert not plain_array(meta((10,), (5,), "|O"))
    assert not plain_array(meta((10,), (5,), [["a", "<i4"], ["b", "<f8"]]))


def test_target_shape_keeps_trailing_axes_whole() -> None:
    nsrdb = meta((17568, 4464), (2688, 372))
    assert virtual_chunk_shape(nsrdb, RechunkSpec(65536)) == (84, 372)  # 84 divides 2688
    assert virtual_chunk_shape(nsrdb, RechunkSpec(744)) == (1, 372)
    # inner rows larger than the target: the leading axes become 1, a row is cut
    big = meta((10, 1000, 1000), (10, 1000, 1000), "<f8")
    assert virtual_chunk_shape(big, RechunkSpec(65536)) == (1, 8, 1000)
    # a single stored chunk along an axis: any length (the tail is padding outside the array)
    contig = meta((3001, 77), (3001, 77), ">f8")
    assert virtual_chunk_shape(contig, RechunkSpec(65536)) == (106, 77)
    # small arrays, compressed arrays and other ranks keep their chunks
    assert virtual_chunk_shape(meta((10, 4), (10, 4)), RechunkSpec(65536)) == (10, 4)
    gz = meta((17568, 4464), (2688, 372), compressor={"id": "zlib", "level": 4})
    assert virtual_chunk_shape(gz, RechunkSpec(65536)) == (2688, 372)
    assert virtual_chunk_shape(nsrdb, RechunkSpec(shape=(1, 2, 3))) == (2688, 372)


def test_explicit_shape_rounds_to_divisors_and_bounds_runs() -> None:
    nsrdb = meta((17568, 4464), (2688, 372))
    assert virtual_chunk_shape(nsrdb, RechunkSpec(shape=(1, 0))) == (1, 372)
    assert virtual_chunk_shape(nsrdb, RechunkSpec(shape=(60, 100))) == (56, 93)
    # 96 runs of 93 values would exceed MAX_RUNS: rows are kept whole instead
    assert virtual_chunk_shape(nsrdb, RechunkSpec(shape=(100, 100))) == (96, 372)
    # a column: 2688 runs of 2 bytes would be one per row, more than MAX_RUNS: widened
    v = virtual_chunk_shape(nsrdb, RechunkSpec(shape=(0, 1)))
    assert v == (2688, 372)
    v = virtual_chunk_shape(nsrdb, RechunkSpec(shape=(MAX_RUNS, 1)))
    assert v == (64, 1) and math.prod(v[:1]) <= MAX_RUNS


CASES = [
    # shape, chunks, dtype, spec
    ((37, 53), (10, 16), ">f8", RechunkSpec(shape=(5, 4))),
    ((37, 53), (10, 16), "<i2", RechunkSpec(256)),
    ((9, 21, 30), (4, 8, 7), "<u4", RechunkSpec(shape=(2, 4, 0))),
    ((9, 21, 30), (4, 8, 7), "<u4", RechunkSpec(shape=(1, 2, 7))),
    ((9, 21, 30), (4, 8, 7), ">i8", RechunkSpec(256)),
    ((3001, 7), (3001, 7), ">f4", RechunkSpec(1024)),  # single stored chunk: padded tail
    ((31, 13), (31, 13), "<i2", RechunkSpec(shape=(4, 5))),  # padding along both axes
    ((100,), (100,), "<i8", RechunkSpec(256)),
    ((100,), (30,), "<i8", RechunkSpec(shape=(7,))),  # 7 -> 6 (divides 30)
]


@pytest.mark.parametrize(("shape", "chunks", "dtype", "spec"), CASES)
def test_runs_reassemble_every_virtual_chunk(shape, chunks, dtype, spec) -> None:  # type: ignore[no-untyped-def]
    m = meta(shape, chunks, dtype)
    v = virtual_chunk_shape(m, spec)
    assert v != chunks or spec.shape, "the case should re-chunk"
    rng = np.random.default_rng(5)
    dt = np.dtype(dtype)
    grid = [-(-n // c) for n, c in zip(shape, chunks, strict=True)]
    padded = rng.integers(-1000, 1000, size=[g * c for g, c in zip(grid, chunks, strict=True)])
    padded = padded.astype(dt)
    values = padded[tuple(slice(0, n) for n in shape)]
    vgrid = [-(-n // c) for n, c in zip(shape, v, strict=True)]
    for vindex in itertools.product(*map(range, vgrid)):
        runs = virtual_runs(shape, chunks, v, vindex, dt.itemsize)
        assert runs.src.size <= MAX_RUNS
        box = tuple(slice(q * c, (q + 1) * c) for q, c in zip(runs.source, chunks, strict=True))
        stored = np.ascontiguousarray(padded[box]).tobytes()  # what HDF5 stores (full chunk)
        out = bytearray(runs.nbytes)
        for s, d, n in zip(runs.src.tolist(), runs.dst.tolist(), runs.lengths.tolist(),
                           strict=True):  # fmt: skip
            out[d : d + n] = stored[s : s + n]
        got = np.frombuffer(bytes(out), dtype=dt).reshape(v)
        lo = [i * c for i, c in zip(vindex, v, strict=True)]
        want = values[tuple(slice(a, a + c) for a, c in zip(lo, v, strict=True))]
        inside = tuple(slice(0, w) for w in want.shape)  # the rest lies outside the array
        np.testing.assert_array_equal(got[inside], want, err_msg=str(vindex))


def test_a_straddling_shape_is_refused() -> None:
    from h5sidecar.errors import InvalidReferenceError

    # 7 does not divide the stored 30: virtual chunk 4 ([28, 35)) would straddle two chunks
    with pytest.raises(InvalidReferenceError, match="straddles"):
        virtual_runs((100,), (30,), (7,), (4,), 8)
    # ... but past the last stored chunk's end it is padding outside the array
    runs = virtual_runs((100,), (100,), (7,), (14,), 8)
    assert runs.lengths.tolist() == [2 * 8] and runs.nbytes == 7 * 8


def test_divisor_search_is_exact_for_ordinary_chunks_and_bounded_for_huge_ones() -> None:
    from h5sidecar.read.zarr._virtual_chunks import _fit

    for chunk in range(1, 250):
        for want in range(1, chunk + 3):
            exact = max(d for d in range(1, min(want, chunk) + 1) if chunk % d == 0)
            assert _fit(want, chunk, False) == exact, (want, chunk)
    assert _fit(10**6, 2688, False) == 2688
    # a planted sidecar's chunk length: an unbounded search would run for minutes here
    prime = 2**61 - 1
    assert _fit(2**30, prime, False) == 1
    assert _fit(2**30, 2**62, False) == 2**30
