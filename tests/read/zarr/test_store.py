"""SidecarStore: zarr's StoreTests conformance (read-only), zarr reads equal h5py, batching."""

from __future__ import annotations

import os
import pickle
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import cpu, default_buffer_prototype
from zarr.core.sync import _collect_aiterator, sync
from zarr.testing.store import StoreTests

from h5sidecar.errors import ForbiddenSourceError, StaleReferenceError
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import ArrayRefs, ChunkManifest, GranuleRefs
from tests._granules import read_h5, refs_for, source_bytes

pytestmark = pytest.mark.anyio

READ_ONLY = "store was opened in read-only mode and does not support writing"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _all_keys(refs: GranuleRefs) -> list[str]:
    return [k for k in SidecarStore(refs).keyspace.all_keys()]


class TestSidecarStore(StoreTests[SidecarStore, cpu.Buffer]):
    """zarr's store conformance suite; write tests assert the read-only error instead."""

    store_cls = SidecarStore
    buffer_cls = cpu.Buffer

    @pytest.fixture
    def store_kwargs(self, small_refs: GranuleRefs) -> dict[str, Any]:
        return {"refs": small_refs}

    @pytest.fixture
    def store(self, open_kwargs: dict[str, Any]) -> SidecarStore:
        # a sync fixture (zarr's loop opens it): sync tests of the suite use it too
        return sync(SidecarStore.open(**open_kwargs))

    async def set(self, store: SidecarStore, key: str, value: cpu.Buffer) -> None:
        raise NotImplementedError("a sidecar store has no backend to write to")

    async def get(self, store: SidecarStore, key: str) -> cpu.Buffer:
        # the oracle: bytes straight from the source file / the sidecar's documents
        value = store.keyspace.documents.get(key) or source_bytes(store.refs, key)
        assert value is not None, key
        return cpu.Buffer.from_bytes(value)

    def test_store_repr(self, store: SidecarStore) -> None:
        assert repr(store) == f"SidecarStore({store.refs.source.url!r}, zarr_format=2)"

    def test_store_supports_writes(self, store: SidecarStore) -> None:
        assert not store.supports_writes
        assert not store.supports_deletes

    def test_store_supports_listing(self, store: SidecarStore) -> None:
        assert store.supports_listing

    def test_store_read_only(self, store: SidecarStore) -> None:
        assert store.read_only
        with pytest.raises(AttributeError):
            store.read_only = False  # type: ignore[misc]

    @pytest.mark.parametrize("read_only", [True, False])
    async def test_store_open_read_only(self, open_kwargs: dict[str, Any], read_only: bool) -> None:
        if not read_only:
            with pytest.raises(ValueError, match="read-only"):
                await SidecarStore.open(**{**open_kwargs, "read_only": False})
            return
        store = await SidecarStore.open(**{**open_kwargs, "read_only": True})
        assert store._is_open and store.read_only

    async def test_serializable_store(self, store: SidecarStore) -> None:
        new = pickle.loads(pickle.dumps(store))
        assert new == store and new.read_only
        key = next(k for k in store.keyspace.all_keys() if k.endswith("h_ph/0"))
        a = await new.get(key, prototype=default_buffer_prototype())
        assert a is not None and a.to_bytes() == (await self.get(store, key)).to_bytes()
        with pytest.raises(ValueError, match=READ_ONLY):
            await new.set("foo", self.buffer_cls.from_bytes(b"bar"))

    async def test_with_read_only_store(self, open_kwargs: dict[str, Any]) -> None:
        store = await SidecarStore.open(**open_kwargs)
        with pytest.raises(ValueError, match="read-only"):
            store.with_read_only(read_only=False)
        reader = store.with_read_only(read_only=True)
        assert reader.read_only and not reader._is_open and reader == store
        with pytest.raises(ValueError, match=READ_ONLY):
            await reader.set("foo", self.buffer_cls.from_bytes(b"bar"))
        with pytest.raises(ValueError, match=READ_ONLY):
            await reader.delete("foo")

    @pytest.mark.parametrize(
        "byte_range",
        [
            None,
            RangeByteRequest(1, 4),
            OffsetByteRequest(3),
            SuffixByteRequest(5),
            RangeByteRequest(2, 10**9),
        ],
    )
    async def test_get(self, store: SidecarStore, byte_range: Any) -> None:  # type: ignore[override]
        for key in store.keyspace.all_keys():
            expected = (await self.get(store, key)).to_bytes()
            n = len(expected)
            if byte_range is None:
                start, stop = 0, n
            elif isinstance(byte_range, RangeByteRequest):
                start, stop = min(byte_range.start, n), min(byte_range.end, n)
            elif isinstance(byte_range, OffsetByteRequest):
                start, stop = min(byte_range.offset, n), n
            else:
                start, stop = max(n - byte_range.suffix, 0), n
            got = await store.get(key, prototype=default_buffer_prototype(), byte_range=byte_range)
            assert got is not None and got.to_bytes() == expected[start:stop], key

    async def test_get_not_open(self, store_not_open: SidecarStore) -> None:
        assert not store_not_open._is_open
        got = await store_not_open.get(".zmetadata", prototype=default_buffer_prototype())
        assert got is not None and b"consolidated" in got.to_bytes()
        assert store_not_open._is_open

    async def test_get_raises(self, store: SidecarStore) -> None:
        with pytest.raises(TypeError, match=r"Unexpected byte_range, got.*"):
            await store.get(
                "gt1l/heights/h_ph/0", prototype=default_buffer_prototype(), byte_range=(0, 2)
            )  # type: ignore[arg-type]

    async def test_get_many(self, store: SidecarStore) -> None:
        keys = list(store.keyspace.all_keys())
        got = await _collect_aiterator(
            store._get_many((k, default_buffer_prototype(), None) for k in keys)
        )
        assert {k: b.to_bytes() for k, b in got} == {
            k: (await self.get(store, k)).to_bytes() for k in keys
        }

    @pytest.mark.parametrize("key", ["c/0"])
    @pytest.mark.parametrize("data", [b""])
    async def test_getsize(self, store: SidecarStore, key: str, data: bytes) -> None:  # type: ignore[override]
        for k in store.keyspace.all_keys():
            assert await store.getsize(k) == len((await self.get(store, k)).to_bytes())

    async def test_getsize_prefix(self, store: SidecarStore) -> None:
        prefix = "gt1l/heights/h_ph"
        keys = [k for k in store.keyspace.all_keys() if k.startswith(prefix + "/")]
        assert len(keys) > 2
        expected = sum([len((await self.get(store, k)).to_bytes()) for k in keys])
        assert await store.getsize_prefix(prefix) == expected

    @pytest.mark.parametrize("key", ["zarr.json"])
    @pytest.mark.parametrize("data", [b"\x01"])
    async def test_set(self, store: SidecarStore, key: str, data: bytes) -> None:  # type: ignore[override]
        with pytest.raises(ValueError, match=READ_ONLY):
            await store.set(key, self.buffer_cls.from_bytes(data))

    async def test_set_not_open(self, store_not_open: SidecarStore) -> None:
        with pytest.raises(ValueError, match=READ_ONLY):
            await store_not_open.set("c/0", self.buffer_cls.from_bytes(b"\x01"))

    async def test_set_many(self, store: SidecarStore) -> None:
        with pytest.raises(ValueError, match=READ_ONLY):
            await store._set_many([("c/0", self.buffer_cls.from_bytes(b"\x01"))])

    async def test_set_if_not_exists(self, store: SidecarStore) -> None:
        with pytest.raises(ValueError, match=READ_ONLY):
            await store.set_if_not_exists("k", self.buffer_cls.from_bytes(b"\x01"))

    async def test_clear(self, store: SidecarStore) -> None:
        with pytest.raises(NotImplementedError):
            await store.clear()
        assert not await store.is_empty("")

    @pytest.mark.parametrize("key_ranges", [None])
    async def test_get_partial_values(self, store: SidecarStore, key_ranges: Any) -> None:  # type: ignore[override]
        keys = list(store.keyspace.all_keys())
        ranges = [
            (k, [None, RangeByteRequest(0, 2), SuffixByteRequest(3), OffsetByteRequest(1)][i % 4])
            for i, k in enumerate(keys)
        ]
        ranges.append(("no/such/key", None))
        got = await store.get_partial_values(default_buffer_prototype(), ranges)
        assert got[-1] is None
        for (key, br), value in zip(ranges[:-1], got[:-1], strict=True):
            single = await store.get(key, default_buffer_prototype(), byte_range=br)
            assert value is not None and single is not None
            assert value.to_bytes() == single.to_bytes()

    async def test_exists(self, store: SidecarStore) -> None:
        assert await store.exists(".zmetadata")
        assert await store.exists("gt1l/heights/h_ph/.zarray")
        assert await store.exists("gt1l/heights/h_ph/4")
        assert not await store.exists("gt1l/heights/h_ph/5")  # outside the grid
        assert not await store.exists("gt1l/heights/h_ph/04")  # not a canonical key
        assert not await store.exists("ancillary_data/sparse/1.1")  # never written
        assert not await store.exists("foo/zarr.json")

    async def test_is_empty(self, store: SidecarStore) -> None:
        assert not await store.is_empty("")
        assert not await store.is_empty("gt1l")
        assert not await store.is_empty("gt1l/heights/")
        assert await store.is_empty("gt1")
        assert await store.is_empty("spam/")

    async def test_list(self, store: SidecarStore) -> None:
        listed = sorted(await _collect_aiterator(store.list()))
        assert len(listed) == len(set(listed))
        for key in listed:  # every listed key has a value, and a correct one
            assert await store.exists(key)
        arr = store.refs.arrays["ancillary_data/sparse"]
        assert sum(k.startswith("ancillary_data/sparse/") and "." in k[-3:] for k in listed) == (
            arr.manifest.n_stored + arr.manifest.n_inline
        )

    async def test_list_prefix(self, store: SidecarStore) -> None:
        everything = await _collect_aiterator(store.list())
        for prefix in ("", "gt1l/", "gt1l/heights/h_ph/", "gt1l/heights/h_ph/1", "anc"):
            got = sorted(await _collect_aiterator(store.list_prefix(prefix)))
            assert got == sorted(k for k in everything if k.startswith(prefix))

    async def test_list_empty_path(self, store: SidecarStore) -> None:
        assert sorted(await _collect_aiterator(store.list_prefix(""))) == sorted(
            await _collect_aiterator(store.list())
        )

    async def test_list_dir(self, store: SidecarStore) -> None:
        root = sorted(await _collect_aiterator(store.list_dir("")))
        assert root == [".zattrs", ".zgroup", ".zmetadata", "ancillary_data", "gt1l"]
        for prefix in ("gt1l/heights", "gt1l/heights/"):
            got = sorted(await _collect_aiterator(store.list_dir(prefix)))
            assert got == [".zattrs", ".zgroup", "delta_time", "h_ph", "lat_ph", "quality_ph"]
        chunks = await _collect_aiterator(store.list_dir("gt1l/heights/h_ph"))
        assert sorted(chunks) == sorted([".zarray", ".zattrs", *map(str, range(5))])
        assert await _collect_aiterator(store.list_dir("nothing/here")) == ()

    async def test_get_bytes(self, store: SidecarStore) -> None:
        key = "gt1l/heights/.zattrs"
        assert (
            await store._get_bytes(key, prototype=default_buffer_prototype())
            == (store.keyspace.documents[key])
        )
        with pytest.raises(FileNotFoundError):
            await store._get_bytes("nonexistent_key", prototype=default_buffer_prototype())

    def test_get_bytes_sync(self, store: SidecarStore) -> None:
        data = store._get_bytes_sync("gt1l/heights/h_ph/2", prototype=default_buffer_prototype())
        assert data == source_bytes(store.refs, "gt1l/heights/h_ph/2")

    async def test_get_json(self, store: SidecarStore) -> None:
        doc = await store._get_json(
            "gt1l/heights/h_ph/.zarray", prototype=default_buffer_prototype()
        )
        assert doc["shape"] == [5000] and doc["chunks"] == [1000]

    def test_get_json_sync(self, store: SidecarStore) -> None:
        doc = store._get_json_sync(".zmetadata", prototype=default_buffer_prototype())
        assert "gt1l/heights/h_ph/.zarray" in doc["metadata"]


# -- zarr reads equal h5py ------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["refs", "json", "parquet"])
def test_every_array_equals_h5py(
    source: str, small_refs: GranuleRefs, small_sidecars: dict[str, str], small_h5: Path
) -> None:
    store = SidecarStore(small_refs if source == "refs" else small_sidecars[source])
    root = zarr.open_group(store, mode="r")
    members = dict(root.members(max_depth=None))  # nested groups come from consolidated metadata
    assert set(small_refs.arrays) <= set(members)
    for path in small_refs.arrays:
        np.testing.assert_array_equal(root[path][...], read_h5(small_h5, path))
    # unallocated chunks read as the HDF5 fill value, as h5py gives them
    assert (root["ancillary_data/sparse"][5:, 5:] == -1.0).all()


def test_v3_view_equals_h5py_and_refuses_big_endian_structs(
    small_refs: GranuleRefs, small_h5: Path
) -> None:
    store = SidecarStore(small_refs, zarr_format=3)
    assert set(store.keyspace.unsupported) == {"gt1l/geolocation/records"}
    assert "big-endian" in store.keyspace.unsupported["gt1l/geolocation/records"]

    def read_all() -> tuple[Any, dict[str, np.ndarray]]:
        root = zarr.open_group(store, mode="r")
        return root, {path: root[path][...] for path in store.keyspace.arrays}

    # zarr warns that numcodecs codecs are not part of the v3 spec (one reason v2 is default)
    with pytest.warns(UserWarning, match="Numcodecs codecs are not in the Zarr version 3"):
        root, arrays = read_all()
    for path, values in arrays.items():
        np.testing.assert_array_equal(values, read_h5(small_h5, path))
    assert "records" not in root["gt1l/geolocation"]
    # same chunk keys in both views
    v2 = {k for k in SidecarStore(small_refs).keyspace.all_keys() if k.split("/")[-1][0] != "."}
    v3 = {k for k in store.keyspace.all_keys() if not k.endswith("zarr.json")}
    assert v3 == {k for k in v2 if not k.startswith("gt1l/geolocation/records/")}


def test_default_mode_needs_r(small_refs: GranuleRefs) -> None:
    with pytest.raises(ValueError, match="read-only"):
        zarr.open_group(SidecarStore(small_refs))


# -- batching, inline, missing --------------------------------------------------------------------
def test_concurrent_gets_coalesce(small_refs: GranuleRefs, small_h5: Path) -> None:
    store = SidecarStore(small_refs, chunk_cache=None)
    arr = zarr.open_group(store, mode="r")["gt1l/heights/h_ph"]
    np.testing.assert_array_equal(arr[:], read_h5(small_h5, "gt1l/heights/h_ph"))
    stats = store.stats
    assert 1 <= stats["requests"] < small_refs.arrays["gt1l/heights/h_ph"].manifest.n_stored
    assert stats["bytes_used"] == small_refs.arrays["gt1l/heights/h_ph"].manifest.stored_bytes

    unbatched = SidecarStore(small_refs, batch_reads=False, chunk_cache=None)
    zarr.open_group(unbatched, mode="r")["gt1l/heights/h_ph"][:]
    assert unbatched.stats["requests"] == 5


async def test_get_partial_values_is_one_fetch(small_refs: GranuleRefs) -> None:
    store = SidecarStore(small_refs)
    calls: list[int] = []
    real_fetch = store.fetcher.fetch

    async def counting_fetch(requests: Any) -> Any:
        calls.append(len(requests))
        return await real_fetch(requests)

    store.fetcher.fetch = counting_fetch  # type: ignore[method-assign]
    keys = [k for k in store.keyspace.all_keys() if "/gt1l/" in "/" + k and k[-1].isdigit()]
    out = await store.get_partial_values(default_buffer_prototype(), [(k, None) for k in keys])
    assert calls == [len(keys)]
    assert [b.to_bytes() for b in out] == [source_bytes(small_refs, k) for k in keys]


def test_inline_and_missing_chunks_need_no_io(small_refs: GranuleRefs, small_h5: Path) -> None:
    store = SidecarStore(small_refs)
    root = zarr.open_group(store, mode="r")
    np.testing.assert_array_equal(
        root["ancillary_data/compact_table"][:], read_h5(small_h5, "ancillary_data/compact_table")
    )
    assert store.stats["inline_chunks"] == 1 and store.stats["requests"] == 0
    root["ancillary_data/sparse"][5:, 5:]
    assert store.stats["missing_chunks"] == 1 and store.stats["requests"] == 0


# -- opening, pickling, safety ----------------------------------------------------------------------
async def test_open_from_sidecar_path(small_sidecars: dict[str, str], small_h5: Path) -> None:
    store = await SidecarStore.open(small_sidecars["parquet"])
    assert store._is_open and store.sidecar == small_sidecars["parquet"]
    buf = await store.get("gt1l/heights/delta_time/1", default_buffer_prototype())
    assert buf is not None and buf.to_bytes() == source_bytes(
        store.refs, "gt1l/heights/delta_time/1"
    )
    clone = pickle.loads(pickle.dumps(store))  # a path-backed store pickles its path, not refs
    assert clone == store and len(pickle.dumps(store)) < 2000


def test_stale_source_is_refused(small_h5: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.h5"
    shutil.copy(small_h5, copy)
    refs = refs_for(copy)
    with open(copy, "ab") as f:  # the granule changes after indexing
        f.write(b"\0" * 16)
    root = zarr.open_group(SidecarStore(refs), mode="r")
    with pytest.raises(StaleReferenceError, match="re-index"):
        root["gt1l/heights/h_ph"][:]


def test_reference_outside_the_granule_is_forbidden(
    small_refs: GranuleRefs, tmp_path: Path
) -> None:
    arr = small_refs.arrays["gt1l/heights/h_ph"]
    elsewhere = str(tmp_path / "elsewhere" / "secret.bin")
    os.makedirs(os.path.dirname(elsewhere))
    Path(elsewhere).write_bytes(b"\0" * 100_000)
    evil = ArrayRefs(
        arr.path,
        arr.meta,
        ChunkManifest.from_arrays(
            urls=[elsewhere],
            codes=arr.manifest.codes,
            offsets=arr.manifest.offsets,
            lengths=arr.manifest.lengths,
        ),
    )
    refs = GranuleRefs(
        source=small_refs.source,
        groups=small_refs.groups,
        arrays={**small_refs.arrays, arr.path: evil},
    )
    root = zarr.open_group(SidecarStore(refs), mode="r")
    with pytest.raises(ForbiddenSourceError):
        root["gt1l/heights/h_ph"][:]


def test_store_over_s3_pickles_without_credentials(
    small_h5: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    from h5sidecar.references import write_refs

    url = f"s3://{s3_bucket}/granules/small.h5"
    s3.put(str(small_h5), url)
    options = {**s3_storage_options, "secret": "s3cr3t-d0-not-pickle"}
    refs = refs_for(url, storage_options=s3_storage_options)
    sidecar = write_refs(
        refs,
        f"s3://{s3_bucket}/sidecars/small.h5.json",
        format="json",
        storage_options=s3_storage_options,
    )
    store = SidecarStore(sidecar, storage_options=options)
    root = zarr.open_group(store, mode="r")
    for path in ("gt1l/heights/h_ph", "gt1l/geolocation/records", "ancillary_data/sparse"):
        np.testing.assert_array_equal(root[path][...], read_h5(small_h5, path))
    assert store.stats["requests"] >= 1 and store.stats["retries"] == 0
    blob = pickle.dumps(store)
    assert b"s3cr3t" not in blob and b"testing" not in blob
    clone = pickle.loads(blob)  # credentials come back from the environment
    np.testing.assert_array_equal(
        zarr.open_group(clone, mode="r")["gt1l/heights/h_ph"][:],
        read_h5(small_h5, "gt1l/heights/h_ph"),
    )


def test_chunk_cache_serves_rereads(small_refs: GranuleRefs, small_h5: Path) -> None:
    from h5sidecar.read._byte_lru import ByteLRU

    cache: ByteLRU[bytes] = ByteLRU(10**6)
    store = SidecarStore(small_refs, chunk_cache=cache)
    arr = zarr.open_group(store, mode="r")["gt1l/heights/delta_time"]
    first = arr[:]
    requests = store.stats["requests"]
    again = arr[:]
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(again, read_h5(small_h5, "gt1l/heights/delta_time"))
    assert store.stats["requests"] == requests  # nothing fetched the second time
    assert store.stats["cache_hits"] == 5 and cache.stats.hits == 5
    tiny: ByteLRU[bytes] = ByteLRU(100)  # smaller than any chunk: caches nothing
    store = SidecarStore(small_refs, chunk_cache=tiny)
    zarr.open_group(store, mode="r")["gt1l/heights/delta_time"][:]
    assert len(tiny) == 0 and store.stats["cache_hits"] == 0


def test_v3_view_of_padded_compound(tmp_path: Path) -> None:
    # HDF5 compounds with gaps come out as structured types with raw-byte padding fields
    import h5py

    dtype = np.dtype({"names": ["a", "b"], "formats": ["<i4", "<f8"], "offsets": [0, 8],
                      "itemsize": 16})  # fmt: skip
    data = np.zeros(6, dtype)
    data["a"], data["b"] = np.arange(6), np.arange(6) * 0.5
    with h5py.File(tmp_path / "pad.h5", "w") as f:
        f.create_dataset("padded", data=data, chunks=(3,))
    refs = refs_for(tmp_path / "pad.h5")
    for fmt in (2, 3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # v3: numcodecs/unstable-spec notices
            got = zarr.open_group(SidecarStore(refs, zarr_format=fmt), mode="r")["padded"][:]
        for name in ("a", "b"):
            np.testing.assert_array_equal(got[name], read_h5(tmp_path / "pad.h5", "padded")[name])
