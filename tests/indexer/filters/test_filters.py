"""HDF5 filter pipelines -> numcodecs: every chunk decoded through our pipeline equals h5py.

Synthetic datasets are written into ``tmp_path`` with h5py + hdf5plugin (one per filter and
variant); the conformance corpus supplies files written by other libraries and HDF5 versions.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

from h5sidecar.errors import UnsupportedFeatureError
from h5sidecar.indexer.filters import (
    chunk_pipeline,
    chunk_pipeline_differs,
    decode_chunk,
    filter_mask_differs,
    hdf5_filters,
    partial_edge_chunks_unfiltered,
    pipeline_for,
)

RNG = np.random.default_rng(42)


def assert_every_chunk_decodes(dset: h5py.Dataset) -> int:
    """Decode every stored chunk's raw bytes through our pipeline and compare with h5py.

    Chunks HDF5 encoded with less than the declared pipeline use :func:`chunk_pipeline`.
    Returns how many chunks needed that.
    """
    declared = pipeline_for(dset)
    edges = partial_edge_chunks_unfiltered(dset)
    infos: list = []
    dset.id.chunk_iter(infos.append)
    assert infos, "the dataset has no stored chunk to check"
    n_special = 0
    for info in infos:
        mask, raw = dset.id.read_direct_chunk(info.chunk_offset)
        pipe = declared
        if chunk_pipeline_differs(dset, mask, info.chunk_offset, unfiltered_edges=edges):
            pipe = chunk_pipeline(dset, mask, info.chunk_offset)
            n_special += 1
        region = tuple(
            slice(o, min(o + c, s))
            for o, c, s in zip(info.chunk_offset, dset.chunks, dset.shape, strict=True)
        )
        expected = dset[region]
        got = np.frombuffer(decode_chunk(raw, pipe), dset.dtype).reshape(dset.chunks)
        got = got[tuple(slice(0, n) for n in expected.shape)]
        if dset.dtype.names:
            assert got.tobytes() == expected.tobytes(), (dset.name, info.chunk_offset)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=f"{dset.name} {info.chunk_offset}")
    return n_special


def _data(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Smooth values with some noise: compressible, so optional compressors never give up."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    # its own seed: the shared RNG's state depends on which tests a worker ran before, and
    # some draws left a chunk LZF gives up on (stored unfiltered), failing the test by chance
    noise = np.random.default_rng(7).integers(-3, 3, n, endpoint=True)
    wave = np.sin(np.arange(n) / 7.0) * 1000 + noise
    if dt.kind == "f":  # quarter steps: exact in binary, and LZF still finds repeats
        return (np.round(wave / 8) / 4).reshape(shape).astype(dt)
    if dt.kind == "u":
        wave = wave + 1000
    return np.clip(wave, np.iinfo(dt).min, np.iinfo(dt).max).reshape(shape).astype(dt)


# -- synthetic datasets, one per filter / variant ------------------------------------------------
PLUGIN_CASES = {
    "gzip": ({"compression": "gzip", "compression_opts": 7}, ["zlib"]),
    "gzip+shuffle+fletcher32": (
        {"compression": "gzip", "shuffle": True, "fletcher32": True},
        ["shuffle", "zlib", "fletcher32"],
    ),
    "lzf": ({"compression": "lzf"}, ["h5sidecar.lzf"]),
    "shuffle+lzf": ({"compression": "lzf", "shuffle": True}, ["shuffle", "h5sidecar.lzf"]),
    "blosc-zstd-bitshuffle": (
        dict(hdf5plugin.Blosc(cname="zstd", clevel=5, shuffle=hdf5plugin.Blosc.BITSHUFFLE)),
        ["blosc"],
    ),
    "blosc-lz4-shuffle": (dict(hdf5plugin.Blosc(cname="lz4", clevel=9)), ["blosc"]),
    "lz4": (dict(hdf5plugin.LZ4()), ["h5sidecar.lz4"]),
    "lz4-small-blocks": (dict(hdf5plugin.LZ4(nbytes=512)), ["h5sidecar.lz4"]),
    "bitshuffle": (dict(hdf5plugin.Bitshuffle(cname="none")), ["h5sidecar.bitshuffle"]),
    "bitshuffle-lz4": (dict(hdf5plugin.Bitshuffle(cname="lz4")), ["h5sidecar.bitshuffle"]),
    "bitshuffle-zstd": (
        dict(hdf5plugin.Bitshuffle(nelems=256, cname="zstd", clevel=5)),
        ["h5sidecar.bitshuffle"],
    ),
    "bzip2": (dict(hdf5plugin.BZip2(blocksize=5)), ["bz2"]),
    "zstd": (dict(hdf5plugin.Zstd(clevel=10)), ["zstd"]),
    "blosc2": (dict(hdf5plugin.Blosc2(cname="zstd", clevel=5)), ["h5sidecar.blosc2"]),
    "zfp-rate": (dict(hdf5plugin.Zfp(rate=12)), ["h5sidecar.zfp"]),
    "zfp-reversible": (dict(hdf5plugin.Zfp(reversible=True)), ["h5sidecar.zfp"]),
    "zfp-accuracy": (dict(hdf5plugin.Zfp(accuracy=1e-3)), ["h5sidecar.zfp"]),
    "sz": (dict(hdf5plugin.SZ(absolute=1e-2)), ["h5sidecar.hdf5filter"]),
    "sz3": (dict(hdf5plugin.SZ3(absolute=1e-2)), ["h5sidecar.hdf5filter"]),
    "scaleoffset-int": ({"scaleoffset": 0}, ["h5sidecar.scaleoffset"]),
    "scaleoffset-float": ({"scaleoffset": 2}, ["h5sidecar.scaleoffset"]),
}


def _synthetic_params() -> list[tuple[str, str]]:
    """Every (filter case, dtype) pair that makes sense: lossy float codecs only on floats, the
    SZ plugins only on little-endian input (they misread big-endian data, h5py included)."""
    out = []
    for case in sorted(PLUGIN_CASES):
        for dtype in ("<i4", ">i2", "<f8", ">f4", "<u8"):
            is_float = np.dtype(dtype).kind == "f"
            float_only = "zfp" in case or case.startswith("sz") or case == "scaleoffset-float"
            if (float_only and not is_float) or (case == "scaleoffset-int" and is_float):
                continue
            if case.startswith("sz") and dtype.startswith(">"):
                continue
            out.append((case, dtype))
    return out


@pytest.mark.parametrize(("case", "dtype"), _synthetic_params())
def test_synthetic_filter_decodes_every_chunk(tmp_path: Path, case: str, dtype: str) -> None:
    kwargs, codec_ids = PLUGIN_CASES[case]
    data = _data(dtype, (37, 45))  # partial edge chunks in both dimensions
    with h5py.File(tmp_path / "f.h5", "w") as f:
        dset = f.create_dataset("x", data=data, chunks=(16, 20), **kwargs)
        assert [c["id"] for c in pipeline_for(dset)] == codec_ids
        assert assert_every_chunk_decodes(dset) == 0
        if "zfp" not in case and not case.startswith("sz") and case != "scaleoffset-float":
            np.testing.assert_array_equal(dset[...], data)  # lossless, so the test has teeth


def test_scaleoffset_with_fill_value_and_big_endian(tmp_path: Path) -> None:
    data = _data(">i4", (30, 8))
    data[::3] = -7  # the fill value gets its own code
    with h5py.File(tmp_path / "f.h5", "w") as f:
        dset = f.create_dataset("x", data=data, chunks=(10, 8), scaleoffset=0, fillvalue=-7)
        assert pipeline_for(dset)[0]["cd_values"][7] == 1  # fill value defined
        assert_every_chunk_decodes(dset)


def _nbit_dataset(f: h5py.File, name: str, tid: h5py.h5t.TypeID, data: np.ndarray) -> h5py.Dataset:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((10,))
    dcpl.set_filter(h5py.h5z.FILTER_NBIT, h5py.h5z.FLAG_OPTIONAL, ())  # = H5Pset_nbit
    space = h5py.h5s.create_simple(data.shape)
    dset = h5py.Dataset(h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl))
    dset[...] = data
    return dset


@pytest.mark.parametrize(("base", "precision", "offset"), [
    (h5py.h5t.STD_I32LE, 17, 3), (h5py.h5t.STD_I16BE, 11, 0), (h5py.h5t.STD_U64LE, 40, 7),
    (h5py.h5t.STD_I8LE, 5, 2),
])  # fmt: skip
def test_nbit_integers_sign_extend_like_h5py(
    tmp_path: Path, base: h5py.h5t.TypeID, precision: int, offset: int
) -> None:
    tid = base.copy()
    tid.set_precision(precision)
    tid.set_offset(offset)
    signed = tid.get_sign() == h5py.h5t.SGN_2
    lo, hi = (
        (-(2 ** (precision - 1)), 2 ** (precision - 1) - 1) if signed else (0, 2**precision - 1)
    )
    data = RNG.integers(lo, hi, 45, endpoint=True).astype(tid.dtype.newbyteorder("="))
    with h5py.File(tmp_path / "f.h5", "w") as f:
        dset = _nbit_dataset(f, "x", tid, data)
        (codec,) = pipeline_for(dset)
        assert codec["id"] == "h5sidecar.nbit"
        assert assert_every_chunk_decodes(dset) == 0
        np.testing.assert_array_equal(dset[...], data)


def test_nbit_compound_with_array_and_noop_members(tmp_path: Path) -> None:
    i16 = h5py.h5t.STD_I16LE.copy()
    i16.set_precision(12)
    u32 = h5py.h5t.STD_U32BE.copy()
    u32.set_precision(20)
    u32.set_offset(5)
    arr = h5py.h5t.array_create(i16, (3,))
    s3 = h5py.h5t.C_S1.copy()
    s3.set_size(3)
    ctype = h5py.h5t.create(h5py.h5t.COMPOUND, 2 + 4 + 6 + 3 + 8)
    ctype.insert(b"a", 0, i16)
    ctype.insert(b"b", 2, u32)
    ctype.insert(b"c", 6, arr)
    ctype.insert(b"s", 12, s3)
    ctype.insert(b"d", 15, h5py.h5t.IEEE_F64LE)
    dt = ctype.dtype
    data = np.zeros(25, dt)
    data["a"] = RNG.integers(-2048, 2047, 25)
    data["b"] = RNG.integers(0, 2**20 - 1, 25)
    data["c"] = RNG.integers(-2048, 2047, (25, 3))
    data["s"] = [b"xyz", b"ab", b"q"] * 8 + [b"end"]
    data["d"] = RNG.standard_normal(25)
    with h5py.File(tmp_path / "f.h5", "w") as f:
        dset = _nbit_dataset(f, "x", ctype, data)
        (codec,) = pipeline_for(dset)
        kinds = [fld[5] for fld in codec["fields"]]
        assert kinds == ["i", "u", "i", "i", "i", "raw", "u"]
        assert_every_chunk_decodes(dset)


def test_nbit_custom_float_is_unsupported_with_reason(corpus_dir: Path) -> None:
    path = corpus_dir / "files/scigolib__hdf5/hdf5_official/tmisc38a.h5"
    with h5py.File(path) as f, pytest.raises(UnsupportedFeatureError) as err:
        pipeline_for(f["Nbit_float_data_le"])
    msg = str(err.value)
    assert "HDF5 filter 5 (nbit" in msg and "cd_values=[8, 0, 12, 1, 4, 0, 20, 7]" in msg
    assert "non-IEEE float" in msg


def test_unknown_filter_raises_naming_it(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "f.h5", "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((4,))
        dcpl.set_filter(47999, h5py.h5z.FLAG_OPTIONAL, (11, 22))  # optional: HDF5 skips it
        space = h5py.h5s.create_simple((8,))
        dset = h5py.Dataset(h5py.h5d.create(f.id, b"x", h5py.h5t.STD_I32LE, space, dcpl=dcpl))
        dset[...] = np.arange(8)
        with pytest.raises(UnsupportedFeatureError, match=r"47999 .*cd_values=\[11, 22\]") as err:
            pipeline_for(dset)
        assert isinstance(err.value, NotImplementedError)
        assert "plugin" in str(err.value) and "h5repack" in str(err.value)
        # HDF5 skipped the unavailable optional filter: every chunk says so in its mask
        mask, raw = dset.id.read_direct_chunk((0,))
        assert filter_mask_differs(mask, 1)
        assert np.frombuffer(raw, "<i4").tolist() == [0, 1, 2, 3]


def test_lzf_on_incompressible_chunks_sets_filter_mask(tmp_path: Path) -> None:
    data = RNG.integers(0, 255, (64, 64), endpoint=True).astype("u1")
    data[:32] = 0  # compressible half, incompressible half
    with h5py.File(tmp_path / "f.h5", "w") as f:
        dset = f.create_dataset("x", data=data, chunks=(32, 64), compression="lzf")
        assert assert_every_chunk_decodes(dset) == 1
        mask, _ = dset.id.read_direct_chunk((32, 0))
        assert chunk_pipeline(dset, mask) == ()


def test_filter_mask_bits() -> None:
    assert not filter_mask_differs(0, 3)
    assert filter_mask_differs(0b010, 3)
    assert not filter_mask_differs(0b1000, 3)  # bits beyond the pipeline are not filters


def test_identity_filters_map_to_nothing(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "f.h5", "w") as f:
        dset = f.create_dataset("x", data=np.arange(50, dtype="u1"), chunks=(10,), shuffle=True)
        assert [x.id for x in hdf5_filters(dset)] == [2]
        assert pipeline_for(dset) == ()  # shuffling 1-byte elements is a no-op
        plain = f.create_dataset("y", data=np.arange(5))
        assert pipeline_for(plain) == () and not partial_edge_chunks_unfiltered(plain)


def test_fletcher32_corruption_raises_like_h5py(tmp_path: Path) -> None:
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        dset = f.create_dataset("x", data=np.arange(400, dtype="<i4"), chunks=(100,),
                                fletcher32=True)  # fmt: skip
        info = dset.id.get_chunk_info(1)
        pipe = pipeline_for(dset)
    blob = bytearray(path.read_bytes())
    blob[info.byte_offset + 10] ^= 0xFF
    path.write_bytes(bytes(blob))
    raw = bytes(blob[info.byte_offset : info.byte_offset + info.size])
    with pytest.raises(RuntimeError, match="fletcher32 checksum"):
        decode_chunk(raw, pipe)
    with h5py.File(path) as f, pytest.raises(OSError):
        f["x"][100:200]  # h5py refuses the same chunk


# -- the conformance corpus ----------------------------------------------------------------------
SKIP_FILTERS = {"mafisc", "myfilter"}


def _corpus_cases() -> list[tuple[str, str]]:
    from tests.conftest import CORPUS

    manifest = CORPUS / "MANIFEST.json"
    if not manifest.exists():
        return [("", "")]
    out = []
    for entry in json.loads(manifest.read_text())["files"]:
        prof = entry.get("profile") or {}
        unreadable = {u["name"] for u in prof.get("h5py_unreadable", [])}
        for ds in prof.get("datasets", []):
            filters = set(ds.get("filters") or ())
            plain = filters <= {"deflate", "shuffle"}
            if not filters or filters & SKIP_FILTERS or ds["name"] in unreadable:
                continue
            if (
                plain
                and "nonzero_filter_mask" not in prof["features"]
                and not any(f in prof["features"] for f in ("dont_filter_partial_edge_chunks",))
            ):
                continue  # plain deflate/shuffle is covered by one representative below
            kind = np.dtype(ds["dtype"]).kind if "O" not in str(ds["dtype"]) else "O"
            if kind == "O" or ("nbit" in filters and kind == "f"):
                continue  # object dtypes are not chunk bytes; nbit custom floats: tested below
            out.append((entry["name"], ds["name"]))
    out.append(("gauteh__hidefix/data/gzip_shuffle_2d.h5", "/data"))
    out.append(("nasa__harmony-trajectory-subsetter/data/ATL03_gt1l.h5", "/gt1l/heights/h_ph"))
    return out


@pytest.mark.corpus
@pytest.mark.parametrize(("name", "path"), _corpus_cases())
def test_corpus_filtered_dataset_decodes_every_chunk(
    corpus_dir: Path, name: str, path: str
) -> None:
    if not name:
        pytest.skip("corpus absent")
    with h5py.File(corpus_dir / "files" / name) as f:
        assert_every_chunk_decodes(f[path])


@pytest.mark.corpus
def test_corpus_partial_edge_chunks_stored_unfiltered(corpus_dir: Path) -> None:
    with h5py.File(corpus_dir / "files/wrwilliams__hdf5/testfiles/h5fc_edge_v3.h5") as f:
        dset = f["DSET_EDGE"]
        assert partial_edge_chunks_unfiltered(dset)
        assert assert_every_chunk_decodes(dset) > 0
        info = dset.id.get_chunk_info(0)
        assert info.filter_mask == 0  # nothing in the mask says so: only the chunk option does


@pytest.mark.corpus
def test_corpus_mafisc_is_unsupported(corpus_dir: Path) -> None:
    src = corpus_dir / "files/HDFGroup__hdf5-examples/tfiles/h5ex_d_mafisc.h5"
    with h5py.File(src) as f, pytest.raises(UnsupportedFeatureError) as err:
        pipeline_for(f["DS1"])
    assert "32002 (MAFISC" in str(err.value)


def _unsupported_filter_file(path: Path) -> Path:
    with h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((100,))
        dcpl.set_fletcher32()
        dcpl.set_filter(32000, h5py.h5z.FLAG_MANDATORY, ())  # LZF after a checksum: size unknown
        space = h5py.h5s.create_simple((1000,))
        dset = h5py.Dataset(h5py.h5d.create(f.id, b"x", h5py.h5t.STD_I32LE, space, dcpl=dcpl))
        dset[...] = np.zeros(1000, "i4")
        f["y"] = np.arange(5.0)
    return path


def test_unsupported_filter_advice_fits_the_mode(tmp_path: Path) -> None:
    """The skip record (the default) does not tell the user to pass the default; raising does."""
    from h5sidecar.indexer import index_granule
    from h5sidecar.settings import IndexSettings

    path = _unsupported_filter_file(tmp_path / "f.h5")
    refs = index_granule(str(path))
    [skip] = [s for s in refs.skipped if s.path.strip("/") == "x"]
    assert "LZF" in skip.reason and "h5repack" in skip.reason
    assert "on_unsupported" not in skip.reason
    assert np.array_equal(refs.arrays["y"].meta.shape, (5,))
    with pytest.raises(UnsupportedFeatureError, match="on_unsupported='skip'"):
        index_granule(str(path), settings=IndexSettings(on_unsupported="raise"))
