"""Sub-chunk reads: a thin selection of an uncompressed array moves only the byte runs it needs;
full reads and compressed arrays read whole chunks as before.  Values compared with h5py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import xarray as xr

import h5sidecar
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import write_refs
from h5sidecar.settings import ReadSettings

WHOLE = ReadSettings(subchunk_fraction=0.0)  # today's behaviour: whole chunks only

#: (name, shape, chunks or None for contiguous, dtype, compression)
ARRAYS = [
    ("wind", (5376, 1116), (2688, 372), "<i2", None),
    ("wind_gz", (5376, 1116), (2688, 372), "<i2", "gzip"),
    ("edge2d", (37, 53), (10, 16), ">f8", None),
    ("cube", (9, 21, 30), (4, 8, 7), "<u4", None),
    ("cube_be", (9, 21, 30), (4, 8, 7), ">i8", None),
    ("contig", (40, 70), None, "<f4", None),
    ("contig3", (6, 11, 13), None, ">u2", None),
    ("contig_big", (6000, 700), None, "<i2", None),  # split into ~4 MiB virtual chunks
]


def _write(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    values = {}
    with h5py.File(path, "w") as f:
        for name, shape, chunks, dtype, comp in ARRAYS:
            data = rng.integers(-30000, 30000, size=shape).astype(dtype)
            f.create_dataset(name, data=data, chunks=chunks, compression=comp)
            values[name] = data
    return values


@pytest.fixture(scope="module")
def granule(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("subchunk")
    h5 = tmp / "g.h5"
    values = _write(h5)
    refs = h5sidecar.index_granule(str(h5))
    sidecar = tmp / "g.h5.parq"
    h5sidecar.write_parquet(refs, sidecar)
    return {"h5": h5, "sidecar": str(sidecar), "values": values}


def _store(granule: dict[str, Any], settings: ReadSettings | None = None) -> SidecarStore:
    # no chunk cache: every read is counted at the fetcher
    return SidecarStore(granule["sidecar"], settings=settings, chunk_cache=None)


SELECTIONS = [
    (0, slice(None)),
    (slice(None), 0),
    (3, 5),
    (slice(2, 9), slice(1, 30, 3)),
    (slice(None, None, -2), slice(4, 5)),
]


@pytest.mark.parametrize("name", ["wind", "wind_gz", "edge2d", "contig"])
@pytest.mark.parametrize("key", SELECTIONS, ids=str)
def test_read_arrays_2d_equals_h5py(granule: dict[str, Any], name: str, key: Any) -> None:
    got = h5sidecar.read_arrays(_store(granule), {name: key})[name]
    with h5py.File(granule["h5"]) as f:
        want = f[name][()][key]  # h5py reads no negative steps: index its whole read
    assert got.dtype == want.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", ["cube", "cube_be", "contig3"])
@pytest.mark.parametrize(
    "key",
    [
        (0, slice(None), slice(None)),
        (slice(None), 3, slice(None)),
        (slice(None), slice(None), 4),
        (2, 5, 6),
        (slice(1, 8), slice(2, 19, 4), slice(3, 27)),
        (slice(None), slice(8, 16), slice(None)),
    ],
    ids=str,
)
def test_read_arrays_3d_equals_h5py(granule: dict[str, Any], name: str, key: Any) -> None:
    got = h5sidecar.read_arrays(_store(granule), {name: key})[name]
    with h5py.File(granule["h5"]) as f:
        want = f[name][()][key]  # h5py reads no negative steps: index its whole read
    np.testing.assert_array_equal(got, want)


def test_one_row_moves_only_its_runs(granule: dict[str, Any]) -> None:
    store = _store(granule)
    got = h5sidecar.read_arrays(store, {"wind": (1000, slice(None))})["wind"]
    np.testing.assert_array_equal(got, granule["values"]["wind"][1000])
    answer = got.nbytes
    assert store.stats["bytes_fetched"] <= 3 * answer
    assert store.stats["requests"] >= 1
    # the same selection with whole chunks: three 2 MB chunks
    whole = _store(granule, WHOLE)
    h5sidecar.read_arrays(whole, {"wind": (1000, slice(None))})
    assert whole.stats["bytes_fetched"] >= 3 * 2688 * 372 * 2


@pytest.mark.parametrize("name", ["wind", "wind_gz", "cube", "contig"])
def test_full_read_moves_the_same_as_whole_chunks(granule: dict[str, Any], name: str) -> None:
    counts = []
    for settings in (None, WHOLE):
        store = _store(granule, settings)
        got = h5sidecar.read_arrays(store, [name])[name]
        np.testing.assert_array_equal(got, granule["values"][name])
        counts.append((store.stats["requests"], store.stats["bytes_fetched"]))
    assert counts[0] == counts[1]


def test_compressed_twin_reads_whole_chunks(granule: dict[str, Any]) -> None:
    counts = []
    for settings in (None, WHOLE):
        store = _store(granule, settings)
        got = h5sidecar.read_arrays(store, {"wind_gz": (1000, slice(None))})["wind_gz"]
        np.testing.assert_array_equal(got, granule["values"]["wind_gz"][1000])
        counts.append((store.stats["requests"], store.stats["bytes_fetched"]))
    assert counts[0] == counts[1]
    assert counts[0][1] > 100 * 1116 * 2  # whole (compressed) chunks


@pytest.mark.parametrize("chunks", [None, {}])
def test_xarray_engine_thin_selection(granule: dict[str, Any], chunks: Any) -> None:
    store = _store(granule)
    ds = xr.open_dataset(store, engine="h5sidecar", chunks=chunks, create_default_indexes=False)
    before = store.stats["bytes_fetched"]
    row = ds["wind"][2700].values
    np.testing.assert_array_equal(row, granule["values"]["wind"][2700])
    assert store.stats["bytes_fetched"] - before <= 3 * row.nbytes
    col = ds["cube_be"][:, :, 4].values
    np.testing.assert_array_equal(col, granule["values"]["cube_be"][:, :, 4])


def test_load_thin_selection(granule: dict[str, Any]) -> None:
    store = _store(granule)
    ds = xr.open_dataset(store, engine="h5sidecar", create_default_indexes=False)
    sub = ds[["wind", "edge2d", "contig3"]].isel(
        {ds["wind"].dims[0]: 7, ds["edge2d"].dims[0]: 7, ds["contig3"].dims[0]: 2}
    )
    h5sidecar.load(sub)
    v = granule["values"]
    np.testing.assert_array_equal(sub["wind"].values, v["wind"][7])
    np.testing.assert_array_equal(sub["edge2d"].values, v["edge2d"][7])
    np.testing.assert_array_equal(sub["contig3"].values, v["contig3"][2])


def test_setting_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from h5sidecar.settings import from_env

    monkeypatch.setenv("H5SIDECAR_SUBCHUNK_FRACTION", "0.25")
    assert from_env(ReadSettings).subchunk_fraction == 0.25
    from h5sidecar.sources.fetch._request_checks import check_read_settings

    with pytest.raises(ValueError, match="subchunk_fraction"):
        check_read_settings(ReadSettings(subchunk_fraction=1.5))


def test_s3_thin_selection(
    granule: dict[str, Any], s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    url = f"s3://{s3_bucket}/subchunk/g.h5"
    s3.put(str(granule["h5"]), url)
    refs = h5sidecar.index_granule(url, storage_options=s3_storage_options)
    sidecar = write_refs(refs, f"{url}.parq", storage_options=s3_storage_options)
    store = SidecarStore(
        sidecar,
        storage_options=s3_storage_options,
        remote_options=s3_storage_options,
        chunk_cache=None,
    )
    row = h5sidecar.read_arrays(store, {"wind": (5000, slice(None))})["wind"]
    np.testing.assert_array_equal(row, granule["values"]["wind"][5000])
    assert store.stats["bytes_fetched"] <= 3 * row.nbytes
    assert store.stats["requests"] <= 3  # one run per chunk (chunks are 2 MB apart)
    # small chunks: runs and neighbouring chunks coalesce as the planner's max_gap allows
    got = h5sidecar.read_arrays(store, {"cube": (slice(None), 20, slice(None))})["cube"]
    np.testing.assert_array_equal(got, granule["values"]["cube"][:, 20])


@pytest.mark.parametrize("name", ["cube", "cube_be", "contig3", "edge2d"])
@pytest.mark.parametrize("max_gap", [0, 16])
def test_runs_in_separate_ranges_equal_h5py(
    granule: dict[str, Any], name: str, max_gap: int
) -> None:
    # no gap bridged: every run of a chunk is its own range (the copying gather path)
    settings = ReadSettings(max_gap=max_gap, subchunk_fraction=1.0)
    nd = granule["values"][name].ndim
    keys = [(slice(1, None, 2), *([slice(2, 5)] * (nd - 1)))]
    keys.append((slice(None),) * (nd - 1) + (3,))
    for key in keys:
        store = _store(granule, settings)
        got = h5sidecar.read_arrays(store, {name: key})[name]
        with h5py.File(granule["h5"]) as f:
            want = f[name][()][key]
        np.testing.assert_array_equal(got, want)
        assert store.stats["bytes_fetched"] < granule["values"][name].nbytes


def test_plan_subchunk_runs() -> None:
    from h5sidecar.read.native._decode import ChunkCodec
    from h5sidecar.read.native._subchunk import plan_subchunk, qualifies

    codec = ChunkCodec(np.dtype("<i2"), (4, 5, 6), "C", (), 0)
    assert qualifies(codec, 240) and not qualifies(codec, 200)
    # [1:3, 2, :]: axis 2 whole, so runs of one row (12 bytes) per index of axis 0
    sub = plan_subchunk(codec, (slice(1, 3), slice(2, 3), slice(0, 6)), 240, max_gap=0, fraction=1)
    assert sub is not None
    assert sub.runs.tolist() == [60 + 24, 120 + 24] and sub.run_len == 12
    assert sub.starts.tolist() == [84, 144] and sub.stops.tolist() == [96, 156]
    # [1:3, :, :]: one run of two planes
    sub = plan_subchunk(codec, (slice(1, 3), slice(0, 5), slice(0, 6)), 240, max_gap=0, fraction=1)
    assert sub is not None and sub.runs.tolist() == [60] and sub.run_len == 120
    # more than the fraction: the whole chunk
    assert (
        plan_subchunk(codec, (slice(0, 3), slice(0, 5), slice(0, 6)), 240, max_gap=0, fraction=0.5)
        is None
    )


def test_chunk_cache_stays_whole_chunks(granule: dict[str, Any]) -> None:
    from h5sidecar.read._byte_lru import ByteLRU

    cache: ByteLRU[bytes] = ByteLRU(256 * 2**20)
    store = SidecarStore(granule["sidecar"], chunk_cache=cache)
    v = granule["values"]["wind"]
    row = h5sidecar.read_arrays(store, {"wind": (9, slice(None))})["wind"]
    np.testing.assert_array_equal(row, v[9])
    assert len(cache) == 0  # runs are not whole chunks: nothing cached
    full = h5sidecar.read_arrays(store, ["wind"])["wind"]
    np.testing.assert_array_equal(full, v)
    assert len(cache) == 6  # the full read cached its whole chunks
    requests = store.stats["requests"]
    row = h5sidecar.read_arrays(store, {"wind": (4000, slice(10, 900))})["wind"]
    np.testing.assert_array_equal(row, v[4000, 10:900])
    assert store.stats["requests"] == requests  # served by the cached whole chunks


@pytest.mark.parametrize("seed", range(3))
def test_random_boxes_equal_h5py(granule: dict[str, Any], seed: int) -> None:
    rng = np.random.default_rng(seed)
    settings = ReadSettings(max_gap=int(rng.integers(0, 64)), subchunk_fraction=1.0)
    store = _store(granule, settings)
    with h5py.File(granule["h5"]) as f:
        for name in ("cube", "cube_be", "contig3", "edge2d", "contig"):
            full = f[name][()]
            for _ in range(10):
                key = []
                for n in full.shape:
                    a, b = sorted(rng.integers(0, n + 1, size=2).tolist())
                    if rng.random() < 0.3:
                        key.append(int(rng.integers(0, n)))
                    else:
                        key.append(slice(a, max(b, a + 1), int(rng.integers(1, 4))))
                got = h5sidecar.read_arrays(store, {name: tuple(key)})[name]
                np.testing.assert_array_equal(got, full[tuple(key)], err_msg=f"{name} {key}")


def test_large_contiguous_row(granule: dict[str, Any]) -> None:
    refs = h5sidecar.index_granule(str(granule["h5"]))
    assert refs.arrays["contig_big"].manifest.n_stored >= 2  # virtual chunks
    v = granule["values"]["contig_big"]
    for key in [(4321, slice(None)), (slice(2990, 3010), slice(5, 9))]:
        store = _store(granule)
        got = h5sidecar.read_arrays(store, {"contig_big": key})["contig_big"]
        np.testing.assert_array_equal(got, v[key])
        assert store.stats["bytes_fetched"] <= 3 * 700 * 2 * 20
