"""The custom numcodecs codecs: entry-point registration, round trips, and Zarr reading them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import hdf5plugin
import imagecodecs
import numcodecs
import numpy as np
import pytest
import zarr

from h5sidecar.codecs import CODECS, HDF5Bitshuffle, HDF5Nbit, HDF5ScaleOffset
from h5sidecar.codecs._bitpack import pack_fields, unpack_fields
from h5sidecar.codecs._bitshuffle import bitunshuffle, bitunshuffle_block_numpy
from h5sidecar.indexer.filters import pipeline_for

RNG = np.random.default_rng(7)


def _smooth(n: int, dtype: str) -> np.ndarray:
    return (np.arange(n) % 91 - 45).astype(dtype)


def _first_chunk(path: Path) -> tuple[list[dict], bytes, np.ndarray]:
    with h5py.File(path) as f:
        dset = f["x"]
        _, raw = dset.id.read_direct_chunk((0,) * dset.ndim)
        region = tuple(slice(0, c) for c in dset.chunks)
        return [dict(c) for c in pipeline_for(dset)], raw, dset[region]


def _write(path: Path, data: np.ndarray, chunks: tuple[int, ...], **kwargs: object) -> Path:
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=data, chunks=chunks, **kwargs)
    return path


FRESH_DECODE = """
import json, sys
import numcodecs, numpy, zarr  # what a plain reader has: no h5sidecar import
cases = json.load(open(sys.argv[1]))
for case in cases:
    buf = bytes.fromhex(case["raw"])
    for cfg in reversed(case["pipeline"]):
        buf = numcodecs.get_codec(cfg).decode(buf)
    got = numpy.frombuffer(bytes(memoryview(numpy.ascontiguousarray(buf)).cast("B")),
                           case["dtype"])
    assert got.tolist() == case["expected"], case["pipeline"]
assert "h5sidecar" not in sys.argv[0]
print("decoded", len(cases), sorted({c["id"] for case in cases for c in case["pipeline"]}))
"""


def test_codecs_resolve_through_entry_points_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """A process that imports only zarr + numcodecs finds and decodes with every codec id."""
    ints, floats = _smooth(600, "<i4").reshape(20, 30), _smooth(600, "<f4").reshape(20, 30) / 4
    i20 = h5py.h5t.STD_I32LE.copy()
    i20.set_precision(20)
    variants: list[tuple[np.ndarray, dict]] = [
        (ints, {"compression": "szip"}),
        (ints, {"scaleoffset": 0}),
        (ints, {"compression": "lzf"}),
        (ints, dict(hdf5plugin.LZ4())),
        (ints, dict(hdf5plugin.Bitshuffle(cname="lz4"))),
        (floats, dict(hdf5plugin.Zfp(rate=16))),
        (ints, dict(hdf5plugin.Blosc2())),
        (floats, dict(hdf5plugin.SZ(absolute=1e-3))),
    ]
    cases = []
    for i, (data, kwargs) in enumerate(variants):
        pipe, raw, expected = _first_chunk(_write(tmp_path / f"{i}.h5", data, (10, 30), **kwargs))
        cases.append(
            {
                "pipeline": pipe,
                "raw": raw.hex(),
                "dtype": expected.dtype.str,
                "expected": expected.ravel().tolist(),
            }
        )
    with h5py.File(tmp_path / "nbit.h5", "w") as f:  # nbit needs a reduced-precision type
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((50,))
        dcpl.set_filter(h5py.h5z.FILTER_NBIT, h5py.h5z.FLAG_OPTIONAL, ())
        sid = h5py.h5s.create_simple((50,))
        dset = h5py.Dataset(h5py.h5d.create(f.id, b"x", i20, sid, dcpl=dcpl))
        dset[...] = np.arange(-25, 25)
        pipe = [dict(c) for c in pipeline_for(dset)]
        raw = dset.id.read_direct_chunk((0,))[1]
        cases.append({"pipeline": pipe, "raw": raw.hex(), "dtype": "<i4",
                      "expected": list(range(-25, 25))})  # fmt: skip
    ids = {c["id"] for case in cases for c in case["pipeline"]}
    assert ids == {c.codec_id for c in CODECS}  # every codec we define is exercised
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    res = subprocess.run(
        [sys.executable, "-c", FRESH_DECODE, str(tmp_path / "cases.json")],
        capture_output=True,
        check=False,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert f"decoded {len(cases)}" in res.stdout


@pytest.mark.parametrize("cls", CODECS, ids=lambda c: c.codec_id)
def test_entry_point_names_match_codec_ids(cls: type) -> None:
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="numcodecs.codecs")}
    assert eps[cls.codec_id] == f"h5sidecar.codecs:{cls.__name__}"


def test_zarr_reads_hdf5_chunks_through_the_codecs(tmp_path: Path) -> None:
    """Zarr 3.1 reading Zarr v2 metadata whose filters are our pipeline gives h5py's values."""
    data = _smooth(37 * 45, "<i8").reshape(37, 45)
    src = _write(tmp_path / "b.h5", data, (16, 20), **hdf5plugin.Bitshuffle(cname="zstd"))
    store: dict[str, bytes] = {}
    with h5py.File(src) as f:
        dset = f["x"]
        meta = {
            "zarr_format": 2, "shape": list(dset.shape), "chunks": list(dset.chunks),
            "dtype": dset.dtype.str, "fill_value": 0, "order": "C",
            "filters": [dict(c) for c in pipeline_for(dset)], "compressor": None,
            "dimension_separator": ".",
        }  # fmt: skip
        store[".zarray"] = json.dumps(meta).encode()

        def put(info: h5py.h5d.StoreInfo) -> None:
            key = ".".join(str(o // c) for o, c in zip(info.chunk_offset, dset.chunks, strict=True))
            store[key] = dset.id.read_direct_chunk(info.chunk_offset)[1]

        dset.id.chunk_iter(put)
        expected = dset[...]
    mem = zarr.storage.MemoryStore()
    for key, val in store.items():
        zarr.core.sync.sync(mem.set(key, zarr.core.buffer.cpu.Buffer.from_bytes(val)))
    arr = zarr.open_array(mem, mode="r", zarr_format=2)
    np.testing.assert_array_equal(arr[...], expected)
    np.testing.assert_array_equal(arr[5:30, 17:44], expected[5:30, 17:44])


# -- round trips (what the indexer relies on when it re-encodes a materialised chunk) ------------
ROUND_TRIPS = {
    "szip": {"id": "h5sidecar.szip", "options_mask": 141, "pixels_per_block": 8,
             "bits_per_pixel": 32, "pixels_per_scanline": 64},
    "lzf": {"id": "h5sidecar.lzf", "nbytes": 4000},
    "lz4": {"id": "h5sidecar.lz4", "blocksize": 256},
    "bitshuffle": {"id": "h5sidecar.bitshuffle", "elementsize": 4},
    "bitshuffle-lz4": {"id": "h5sidecar.bitshuffle", "elementsize": 4, "blocksize": 64,
                       "compression": 2},
    "bitshuffle-zstd": {"id": "h5sidecar.bitshuffle", "elementsize": 4, "compression": 3},
    "blosc2": {"id": "h5sidecar.blosc2", "typesize": 4},
    "scaleoffset": {"id": "h5sidecar.scaleoffset", "dtype": "<i4",
                    "cd_values": [2, 0, 1000, 0, 4, 1, 0, 0] + [0] * 12},
    "nbit": {"id": "h5sidecar.nbit", "itemsize": 4, "nelements": 1000,
             "fields": [[0, 4, "<", 32, 0, "u"]]},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_encode_decode_round_trip(name: str) -> None:
    codec = numcodecs.get_codec(dict(ROUND_TRIPS[name]))
    assert numcodecs.get_codec(codec.get_config()) == codec
    data = (RNG.standard_normal(1000) * 1000).astype("<i4")
    back = np.frombuffer(bytes(codec.decode(codec.encode(data.tobytes()))), "<i4")
    np.testing.assert_array_equal(back, data)


def test_scaleoffset_float_round_trip_is_exact() -> None:
    codec = HDF5ScaleOffset("<f8", [0, 3, 100, 1, 8, 0, 0, 0] + [0] * 12)
    data = RNG.standard_normal(100)
    back = np.frombuffer(codec.decode(codec.encode(data.tobytes())), "<f8")
    np.testing.assert_array_equal(back, data)  # the full-precision escape is lossless


def test_nbit_signed_field_round_trip() -> None:
    codec = HDF5Nbit(2, 50, [[0, 2, ">", 9, 3, "i"]])
    data = np.arange(-25, 25, dtype=">i2")
    packed = codec.encode(data.tobytes())
    assert len(packed) == (50 * 9 + 7) // 8  # 9 bits per value, no padding between values
    np.testing.assert_array_equal(np.frombuffer(codec.decode(packed), ">i2"), data)


@pytest.mark.parametrize("widths", [[1], [7], [13], [32], [57], [64], [3, 64, 1, 16], [12, 20, 24]])
def test_bit_fields_round_trip_any_width(widths: list[int]) -> None:
    n = 1001
    fields = [
        RNG.integers(0, 2**w - 1, n, dtype=np.uint64, endpoint=True) if w < 64
        else RNG.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        for w in widths
    ]  # fmt: skip
    stream = np.frombuffer(pack_fields(fields, widths), np.uint8)
    assert stream.size == (n * sum(widths) + 7) // 8
    for got, want in zip(unpack_fields(stream, widths, n), fields, strict=True):
        np.testing.assert_array_equal(got, want)


def test_bit_fields_pack_and_unpack_msb_first() -> None:
    stream = np.frombuffer(pack_fields([np.array([5, 1]), np.array([3, 0])], [3, 2]), np.uint8)
    assert stream.tolist() == [0b10111001, 0b00000000]  # 101 11 | 001 00 | pad
    a, b = unpack_fields(stream, [3, 2], 2)
    assert a.tolist() == [5, 1] and b.tolist() == [3, 0]
    with pytest.raises(ValueError, match="truncated"):
        unpack_fields(stream[:1], [3, 2], 2)


@pytest.mark.parametrize("elem", [1, 2, 4, 8])
def test_numpy_bitunshuffle_matches_bitshuffle_library(elem: int) -> None:
    n = 64  # one block
    data = RNG.integers(0, 255, n * elem, endpoint=True).astype(np.uint8)
    shuffled = imagecodecs.bitshuffle_encode(data.tobytes(), itemsize=elem, blocksize=n)
    got = bitunshuffle_block_numpy(np.frombuffer(shuffled, np.uint8), n, elem)
    np.testing.assert_array_equal(got, data)


def test_bitunshuffle_keeps_trailing_elements() -> None:
    data = RNG.integers(0, 255, 4 * 75, endpoint=True).astype(np.uint8)  # 75 = 64 + 8 + 3
    shuffled = imagecodecs.bitshuffle_encode(data.tobytes(), itemsize=4, blocksize=64)
    np.testing.assert_array_equal(bitunshuffle(np.frombuffer(shuffled, np.uint8), 4, 64), data)


def test_bitshuffle_compound_elements_against_h5py(tmp_path: Path) -> None:
    dt = np.dtype([("a", "<i4"), ("b", "<f8")])  # 12-byte elements: the numpy path
    data = np.zeros(300, dt)
    data["a"] = np.arange(300)
    data["b"] = np.arange(300) / 4
    for cname in ("none", "lz4", "zstd"):
        src = _write(tmp_path / f"{cname}.h5", data, (150,), **hdf5plugin.Bitshuffle(cname=cname))
        pipe, raw, expected = _first_chunk(src)
        codec = numcodecs.get_codec(pipe[0])
        assert isinstance(codec, HDF5Bitshuffle) and codec.elementsize == 12
        assert np.frombuffer(codec.decode(raw), dt).tobytes() == expected.tobytes()


def test_bitshuffle_rejects_a_corrupt_header() -> None:
    codec = HDF5Bitshuffle(4, compression=2)
    with pytest.raises(ValueError, match="header is invalid"):
        codec.decode(b"\x00" * 7 + b"\x07" + b"\x00" * 8)
