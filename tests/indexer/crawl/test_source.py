"""The indexer's source reader: h5py through it reads what h5py reads from the file, in few
requests, pinned to one object version; bad objects and faults raise specific errors."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import hdf5plugin  # noqa: F401  (filters the corpus files need)
import numpy as np
import pytest

from h5sidecar.errors import (
    NotHDF5Error,
    SourceNotFoundError,
    SourceReadError,
    StaleReferenceError,
)
from h5sidecar.indexer.crawl import _hints as hints
from h5sidecar.indexer.crawl._source_file import LocalSource, RemoteSource, open_source
from h5sidecar.references import gc_paused
from h5sidecar.settings import IndexSettings, ReadSettings, from_env
from h5sidecar.sources.fetch._pages import PAGE
from tests.faultproxy import FaultProxy

#: (libver, user block size): classic format, newest format, classic behind a 1 KiB user block
VARIANTS = {"earliest": ("earliest", 0), "latest": ("latest", 0), "userblock": ("earliest", 1024)}


# -- granules ------------------------------------------------------------------------------------
def write_granule(path: Path, libver: str, userblock: int = 0) -> Path:
    """~0.9 MB, 40 objects: appended chunked datasets (chunk indexes interleaved with data), fixed
    and two-unlimited chunked, contiguous, compact, strings, dense attributes and links, a scale.
    ``latest`` gives fixed/extensible arrays, v2 B-trees and v2 object headers."""
    rng = np.random.default_rng(7)
    with h5py.File(path, "w", libver=libver, userblock_size=userblock) as f:
        f.attrs["title"] = "synthetic granule"
        meta = f.create_group("METADATA", track_order=True)
        for i in range(20):
            meta.attrs[f"attr{i:02d}"] = f"value {i}"
        anc = f.create_group("ancillary", track_order=True)
        for i in range(12):
            anc.create_dataset(f"p{i:02d}", data=np.float32(i)).attrs["units"] = "1"
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        anc.create_dataset("compact", data=np.arange(10, dtype="i2"), dcpl=dcpl)
        anc.create_dataset("names", data=np.array([b"alpha", b"beta"], dtype="S8"))
        anc.create_dataset("vlen", data=["one", "two", "three"], dtype=h5py.string_dtype())
        grow = []
        for b in range(3):
            g = f.create_group(f"beam{b}")
            for name, dtype in (("h", "f4"), ("t", "f8"), ("q", "i1")):
                ds = g.create_dataset(
                    name,
                    shape=(0,),
                    maxshape=(None,),
                    dtype=dtype,
                    chunks=(100,),
                    compression="gzip",
                    shuffle=dtype == "i1",
                )
                ds.attrs["long_name"] = f"beam {b} {name}"
                grow.append(ds)
            g.create_dataset(
                "fixed",
                data=rng.normal(size=(40, 30)).astype("f4"),
                chunks=(8, 10),
                compression="gzip",
            )
            two = g.create_dataset(
                "two_unlimited", shape=(48, 40), maxshape=(None, None), dtype="i4", chunks=(16, 16)
            )
            two[...] = rng.integers(0, 1000, (48, 40))
            g.create_dataset("contiguous", data=rng.normal(size=2000))
        for _ in range(18):
            for ds in grow:
                n = ds.shape[0]
                ds.resize((n + 1000,))
                ds[n:] = (
                    rng.normal(size=1000).cumsum()
                    if ds.dtype.kind == "f"
                    else rng.integers(0, 4, 1000)
                )
        f["beam0/t"].make_scale("t")
        f["beam0/h"].dims[0].attach_scale(f["beam0/t"])
    return path


@pytest.fixture(scope="module", params=list(VARIANTS))
def granule(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("g") / f"{request.param}.h5"
    return write_granule(path, *VARIANTS[request.param])


@pytest.fixture(scope="module")
def classic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One variant, for tests about errors and options rather than formats."""
    return write_granule(tmp_path_factory.mktemp("c") / "classic.h5", "earliest")


@pytest.fixture(scope="module")
def atl03(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from h5sidecar.sample import write_atl03_like

    return write_atl03_like(tmp_path_factory.mktemp("atl") / "ATL03.h5", photons=5000, seed=2)


@pytest.fixture
def proxied(proxy: FaultProxy, s3_storage_options: dict[str, object]) -> dict[str, object]:
    """The storage_options a user passes, pointed at the counting/fault-injecting proxy."""
    return {**s3_storage_options, "endpoint_url": proxy.url}


@pytest.fixture
def upload(s3: Any, s3_bucket: str) -> Callable[[Path | bytes, str], str]:
    def put(src: Path | bytes, name: str) -> str:
        url = f"s3://{s3_bucket}/granules/{name}"
        if isinstance(src, bytes):
            s3.pipe(url, src)
        else:
            s3.put(str(src), url)
        return url

    return put


# -- what h5py sees ------------------------------------------------------------------------------
def describe(f: h5py.File, *, values: bool = True) -> dict[str, Any]:
    """Everything an indexer reads, comparable across files: per object its attributes and, for
    datasets, shape, dtype, chunking, filters, chunk_iter records and (optionally) values."""
    out: dict[str, Any] = {"/": _attrs(f, f)}

    def visit(name: str, obj: Any) -> None:
        entry: dict[str, Any] = {"attrs": _attrs(f, obj)}
        if isinstance(obj, h5py.Dataset):
            chunks: list[tuple[Any, ...]] = []
            if obj.chunks is not None:
                obj.id.chunk_iter(
                    lambda c: chunks.append((c.chunk_offset, c.filter_mask, c.byte_offset, c.size))
                )
            dcpl = obj.id.get_create_plist()
            entry.update(
                shape=obj.shape,
                dtype=obj.dtype.str,
                chunks=obj.chunks,
                index=chunks,
                filters=[dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())],
            )
            if values:
                entry["value"] = _plain(obj[()])
        out[name] = entry

    f.visititems(visit)
    return out


def _attrs(f: h5py.File, obj: Any) -> dict[str, Any]:
    out = {}
    for key, value in obj.attrs.items():
        if key in ("DIMENSION_LIST", "REFERENCE_LIST"):  # object references: compare targets
            value = [_address(f, ref) for row in value for ref in _refs(row)]
        out[key] = _plain(value)
    return out


def _refs(row: Any) -> list[h5py.Reference]:
    items = row.tolist() if isinstance(row, np.ndarray | np.void) else [row]
    flat = [x for item in items for x in (item if isinstance(item, tuple) else (item,))]
    return [x for x in flat if isinstance(x, h5py.Reference)]


def _address(f: h5py.File, ref: h5py.Reference) -> int:
    # the target's header address (``f[ref].name`` would search the whole file for a path)
    return int(h5py.h5o.get_info(h5py.h5r.dereference(ref, f.id)).addr)


def _plain(value: Any) -> Any:
    arr = np.asarray(value)
    if arr.dtype.kind == "O":
        return [_plain(v) for v in arr.ravel()]
    return (arr.dtype.str, arr.shape, arr.tobytes())


def scan(source: Any, *, values: bool = True) -> dict[str, Any]:
    # with the collector paused, as the indexer reads: a collection on fsspec's I/O thread
    # that frees an h5py object waits for the lock h5py holds while it reads (a deadlock)
    with gc_paused(), h5py.File(source, "r") as f:
        return describe(f, values=values)


# -- S3: equal reads, identity, request budget ---------------------------------------------------
def test_h5py_through_s3_source_reads_what_it_reads_locally(
    granule: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy
) -> None:
    url = upload(granule, granule.name)
    with open_source(url, storage_options=proxied) as f:
        assert isinstance(f, RemoteSource)
        remote = scan(f)
        stats = f.stats
    assert remote == scan(granule)
    seen = proxy.gets()
    assert len(proxy.requests) == len(seen) == stats.requests  # GETs only: no HEAD, no listing
    fetched = [tuple(map(int, r.range.removeprefix("bytes=").split("-"))) for r in seen]
    assert sum(b - a + 1 for a, b in fetched) == stats.bytes_fetched
    assert _overlap(fetched) == 0  # no byte fetched twice


def _overlap(ranges: list[tuple[int, int]]) -> int:
    ends = sorted(ranges)
    return sum(max(0, prev[1] - cur[0] + 1) for prev, cur in itertools.pairwise(ends))


def test_identity_is_taken_from_the_first_response(
    classic: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy, s3: Any
) -> None:
    url = upload(classic, "id.h5")
    with open_source(url, storage_options=proxied, prefetch=False) as f:
        assert f.stats.requests == 1 and len(proxy.requests) == 1
        assert proxy.requests[0].method == "GET" and proxy.requests[0].range.startswith("bytes=0-")
        info = s3.info(url)
        assert f.identity.url == url and f.url == url
        assert f.identity.size == info["size"] == classic.stat().st_size
        assert f.identity.etag == info["ETag"].strip('"')
        assert f.identity.mtime == pytest.approx(info["LastModified"].timestamp(), abs=1)


def walk(source: Any) -> list[Any]:
    """What an indexer's scan reads, kept cheap: every object's attributes (read, not decoded)
    and every chunked dataset's chunk index."""
    out: list[Any] = []

    def visit(name: str, obj: Any) -> None:
        out.append((name, sorted(obj.attrs.keys()), len(list(obj.attrs.values()))))
        if isinstance(obj, h5py.Dataset) and obj.chunks is not None:
            obj.id.chunk_iter(lambda c: out.append((name, c.chunk_offset, c.byte_offset, c.size)))

    with gc_paused(), h5py.File(source, "r") as f:  # as in scan
        f.visititems(visit)
    return out


def test_prefetch_reads_ahead_of_hdf5_in_few_requests(
    atl03: Path, upload: Any, s3_storage_options: dict[str, object]
) -> None:
    url = upload(atl03, atl03.name)
    measured = {}
    crawling = IndexSettings(source_whole_object_bytes=0)  # a small file: never fetched whole
    for prefetch in (True, False):
        with open_source(url, storage_options=s3_storage_options, prefetch=prefetch,
                         settings=crawling) as f:
            walked = walk(f)
            measured[prefetch] = f.stats
        assert walked == walk(atl03)
    crawl, plain = measured[True], measured[False]
    assert crawl.structures_found > 1000  # ~950 variables, their headers and index nodes
    # HDF5 rarely waits for the network: the crawl fetched its metadata before it asked ...
    assert crawl.waits * 5 < plain.waits
    # ... in requests that each carry many of HDF5's reads, and without re-reading the file
    assert crawl.requests * 10 < crawl.reads_by_hdf5
    assert crawl.bytes_fetched < 1.2 * crawl.bytes_read_by_hdf5


def test_a_small_object_is_fetched_whole_in_one_more_round_trip(
    atl03: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy
) -> None:
    url = upload(atl03, "whole.h5")
    size = atl03.stat().st_size
    part = 256 * 1024
    settings = IndexSettings(source_whole_object_bytes=size, metadata_block_size=part,
                             source_max_gap=0)
    with open_source(url, storage_options=proxied, settings=settings) as f:
        assert walk(f) == walk(atl03)
        stats = f.stats
    # the head, then the rest in concurrent parts of metadata_block_size: nothing on demand
    assert size > 2 * part
    assert stats.requests == len(proxy.gets()) == 1 + -(-(size - part) // part)
    assert stats.bytes_fetched == size and stats.waits <= 1
    # one byte over the limit: the crawl reads metadata only
    proxy.requests.clear()
    settings = IndexSettings(source_whole_object_bytes=size - 1)
    with open_source(url, storage_options=proxied, settings=settings) as f:
        assert walk(f) == walk(atl03)
        assert f.stats.bytes_fetched < size


def test_a_small_object_that_is_not_hdf5_is_not_fetched_whole(
    upload: Any, tmp_path: Path, proxied: dict[str, object], proxy: FaultProxy
) -> None:
    path = tmp_path / "notes.h5"
    path.write_bytes(b"not an HDF5 file\n" * 100_000)  # 1.7 MB, under the default limit
    assert path.stat().st_size < IndexSettings().source_whole_object_bytes
    url = upload(path, "notes.h5")
    with pytest.raises(NotHDF5Error), open_source(url, storage_options=proxied):
        pass
    # the head, then only the signature search's reads (at 512 KiB, 1 MiB): not the whole file
    fetched = [tuple(map(int, r.range.removeprefix("bytes=").split("-"))) for r in proxy.gets()]
    assert sum(b - a + 1 for a, b in fetched) < path.stat().st_size / 2


@pytest.mark.parametrize("cache_bytes", [64 * 1024, 3 * PAGE])
def test_a_tiny_cache_still_reads_correctly(
    classic: Path, upload: Any, s3_storage_options: dict[str, object], cache_bytes: int
) -> None:
    url = upload(classic, "tiny-cache.h5")
    with open_source(url, storage_options=s3_storage_options, cache_bytes=cache_bytes) as f:
        assert scan(f, values=False) == scan(classic, values=False)


def test_read_ranges_returns_chunk_bytes_in_few_requests(
    classic: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy
) -> None:
    with h5py.File(classic) as h5:
        chunks: list[tuple[int, int]] = []
        h5["beam1/h"].id.chunk_iter(lambda c: chunks.append((c.byte_offset, c.size)))
    data = classic.read_bytes()
    expected = [data[off : off + n] for off, n in chunks]
    url = upload(classic, "ranges.h5")
    with open_source(url, storage_options=proxied, prefetch=False) as f:
        before = len(proxy.requests)
        assert f.read_ranges(chunks[::-1]) == expected[::-1]
        assert len(proxy.requests) - before < len(chunks) / 10  # coalesced
        with pytest.raises(SourceReadError, match="outside"):
            f.read_ranges([(f.size - 10, 20)])
    with open_source(classic) as f:
        assert f.read_ranges(chunks) == expected
        with pytest.raises(SourceReadError, match="outside"):
            f.read_ranges([(f.size - 10, 20)])


def test_a_range_longer_than_one_request_is_still_one_get(
    classic: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy
) -> None:
    data = classic.read_bytes()
    url = upload(classic, "long-range.h5")
    settings = IndexSettings(metadata_block_size=64 * 1024, source_max_gap=0)
    with open_source(url, storage_options=proxied, settings=settings, prefetch=False) as f:
        before = len(proxy.gets())
        assert f.read_ranges([(0, 200_000), (10, 5)]) == [data[:200_000], data[10:15]]
        assert len(proxy.gets()) - before == 1  # the planner's span, not its parallel parts


# -- a changing object ---------------------------------------------------------------------------
def test_object_replaced_mid_scan_is_stale(
    granule: Path, upload: Any, s3_storage_options: dict[str, object]
) -> None:
    url = upload(granule, "replaced.h5")
    with open_source(url, storage_options=s3_storage_options, prefetch=False) as f:
        data = granule.read_bytes()
        upload(data[:-1] + bytes([data[-1] ^ 0xFF]), "replaced.h5")  # same size, new ETag
        with pytest.raises(StaleReferenceError, match="changed while it was being read") as err:
            scan(f)
    assert err.value.url == url


def test_object_deleted_mid_scan_is_not_found(
    classic: Path, upload: Any, s3: Any, s3_storage_options: dict[str, object]
) -> None:
    url = upload(classic, "deleted.h5")
    with open_source(url, storage_options=s3_storage_options, prefetch=False) as f:
        s3.rm(url)
        with pytest.raises(SourceNotFoundError, match="no such object"):
            scan(f)


def test_local_file_changed_while_open_is_stale(granule: Path, tmp_path: Path) -> None:
    path = tmp_path / "local.h5"
    path.write_bytes(granule.read_bytes())
    with (
        pytest.raises(StaleReferenceError, match="changed while it was being indexed"),
        open_source(path) as f,
    ):
        scan(f, values=False)
        with path.open("ab") as out:
            out.write(b"appended")


# -- bad objects and faults ----------------------------------------------------------------------
def _bad_objects(granule: Path) -> dict[str, tuple[bytes, type[Exception], str]]:
    data = granule.read_bytes()
    return {
        "text.h5": (b"hello, not HDF5 at all\n" * 100, NotHDF5Error, "no HDF5 signature"),
        "truncated.h5": (data[: len(data) // 2], NotHDF5Error, "truncated HDF5 file"),
        "empty.h5": (b"", NotHDF5Error, "empty"),
    }


@pytest.mark.parametrize("name", ["text.h5", "truncated.h5", "empty.h5"])
def test_not_hdf5_objects_are_refused(
    classic: Path, upload: Any, s3_storage_options: dict[str, object], tmp_path: Path, name: str
) -> None:
    payload, error, message = _bad_objects(classic)[name]
    local = tmp_path / name
    local.write_bytes(payload)
    for url, options in ((upload(payload, name), s3_storage_options), (str(local), None)):
        with pytest.raises(error, match=message), open_source(url, storage_options=options):
            pass


def test_missing_sources_are_not_found(
    s3_bucket: str, s3_storage_options: dict[str, object], tmp_path: Path
) -> None:
    for url, options in ((f"s3://{s3_bucket}/nope.h5", s3_storage_options), (tmp_path / "x", None)):
        with pytest.raises(SourceNotFoundError, match="does not exist"):
            open_source(url, storage_options=options).__enter__()


def test_transient_faults_are_retried_transparently(
    classic: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy
) -> None:
    url = upload(classic, "flaky.h5")
    proxy.inject("500", times=1)
    proxy.inject("reset", times=1)
    with open_source(url, storage_options=proxied) as f:
        assert scan(f, values=False) == scan(classic, values=False)
    assert sum(r.fault is not None for r in proxy.requests) == 2


def test_a_stalled_request_is_retried_then_refused_within_its_timeout(
    classic: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy
) -> None:
    """A server that stops answering costs ``source_request_timeout`` per attempt: the next
    attempt reads on; one that never answers is a SourceReadError, not a wait without end."""
    import time

    url = upload(classic, "stalled.h5")
    settings = IndexSettings(source_request_timeout=0.5, source_retries=1, source_backoff=0.0)
    with open_source(url, storage_options=proxied, settings=settings, prefetch=False) as f:
        proxy.inject("hang", times=1)
        assert scan(f, values=False) == scan(classic, values=False)
        assert f.fetch_stats.retries == 1
    proxy.inject("hang", times=1000)
    started = time.monotonic()
    with pytest.raises(SourceReadError, match=r"source_request_timeout=0\.5 s") as err:
        open_source(url, storage_options=proxied, settings=settings).__enter__()
    assert time.monotonic() - started < 10  # two attempts of 0.5 s, not a hang
    assert err.value.url == url


@pytest.mark.parametrize(("retries", "counted"), [(0, 0), (2, 1)])
def test_retries_follow_index_settings_and_are_counted(
    classic: Path,
    upload: Any,
    proxied: dict[str, object],
    proxy: FaultProxy,
    retries: int,
    counted: int,
) -> None:
    url = upload(classic, f"retried-{retries}.h5")
    settings = IndexSettings(source_retries=retries, source_backoff=0.0)
    with open_source(url, storage_options=proxied, settings=settings, prefetch=False) as f:
        proxy.inject("500", times=1)  # the next GET; without retries, demand asks once more
        assert scan(f, values=False) == scan(classic, values=False)
        assert f.fetch_stats.retries == counted
    assert sum(r.fault is not None for r in proxy.requests) == 1


def test_source_settings_tune_the_remote_reader(
    classic: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy
) -> None:
    url = upload(classic, "tuned.h5")
    env = {"H5SIDECAR_SOURCE_FIRST_REQUEST": "8192", "H5SIDECAR_SOURCE_READAHEAD": "0"}
    settings = from_env(IndexSettings, env=env)
    assert from_env(ReadSettings, env={"H5SIDECAR_SOURCE_RETRIES": "9"}).retries == 5
    with open_source(url, storage_options=proxied, settings=settings, prefetch=False) as f:
        assert proxy.gets()[0].range == "bytes=0-8191"
        scan(f, values=False)
        assert f.stats.prefetch_requests == 0 and f.stats.structures_found == 0
    with open_source(url, storage_options=proxied, prefetch=False) as f:
        assert proxy.gets()[-1].range == f"bytes=0-{256 * 1024 - 1}"  # the default


@pytest.mark.parametrize(("fault", "message"), [("500", "retry"), ("403", "access denied")])
def test_persistent_faults_raise_source_read_error(
    classic: Path,
    upload: Any,
    proxied: dict[str, object],
    proxy: FaultProxy,
    fault: str,
    message: str,
) -> None:
    url = upload(classic, "broken.h5")
    with open_source(url, storage_options=proxied, prefetch=False) as f:
        proxy.inject(fault, times=1000)
        with pytest.raises(SourceReadError, match=message) as err:
            scan(f)
    assert err.value.url == url


@pytest.mark.parametrize("fault", ["shift", "relabel", "superset", "whole", "long", "short"])
@pytest.mark.parametrize("first", [True, False])
def test_answers_of_another_range_are_refused(
    classic: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy, fault: str,
    first: bool,
) -> None:
    # the first request (identity and head) and every later one: bytes of another range, or
    # a body longer or shorter than its range, never reach the cache
    url = upload(classic, "ranges.h5")
    settings = IndexSettings(source_retries=1, source_backoff=0.0, source_first_request=4096)
    if first:
        proxy.inject(fault, times=1000)
        with pytest.raises(SourceReadError) as err:
            open_source(url, storage_options=proxied, settings=settings).__enter__()
    else:
        with open_source(url, storage_options=proxied, settings=settings, prefetch=False) as f:
            proxy.inject(fault, times=1000)
            with pytest.raises(SourceReadError) as err:
                scan(f)
    assert err.value.url == url
    tries = len(proxy.gets()) if first else len([r for r in proxy.gets() if r.fault])
    # obstore's Content-Range check is final; a body of the wrong length is retried once
    assert tries >= (2 if fault in ("long", "short") else 1)


@pytest.mark.parametrize("fault", ["long", "short"])
def test_a_first_answer_of_the_wrong_length_is_asked_again(
    classic: Path, upload: Any, proxied: dict[str, object], proxy: FaultProxy, fault: str
) -> None:
    url = upload(classic, "first.h5")
    settings = IndexSettings(source_retries=1, source_backoff=0.0, source_first_request=4096)
    proxy.inject(fault, times=1)
    with open_source(url, storage_options=proxied, settings=settings, prefetch=False) as f:
        assert f.fetch_stats.retries == 1  # the head was fetched again, not cached as sent
        assert scan(f, values=True) == scan(classic, values=True)


def test_unreachable_endpoint_is_a_source_read_error() -> None:
    from tests.conftest import free_port

    options = {"endpoint_url": f"http://127.0.0.1:{free_port()}", "key": "k", "secret": "s"}
    with pytest.raises(SourceReadError, match="check the endpoint"):
        open_source("s3://bucket/granule.h5", storage_options=options).__enter__()


# -- local files ----------------------------------------------------------------------------------
def test_local_source_reads_the_file_itself(granule: Path) -> None:
    with open_source(f"file://{granule}", settings=IndexSettings()) as f:
        assert isinstance(f, LocalSource)
        assert f.url == str(granule)
        st = os.stat(granule)
        assert (f.identity.size, f.identity.etag, f.identity.mtime) == (
            st.st_size,
            None,
            st.st_mtime,
        )
        assert scan(f) == scan(granule)
        stats = f.stats  # one pread per HDF5 read, plus the signature search at open
        assert 0 < stats.requests - stats.reads_by_hdf5 <= 4
        assert 0 < stats.bytes_fetched - stats.bytes_read_by_hdf5 <= 1024


def test_file_object_protocol(classic: Path) -> None:
    data = classic.read_bytes()
    with open_source(classic) as f:
        assert f.readable() and f.seekable() and not f.writable()
        assert f.seek(-10, os.SEEK_END) == len(data) - 10 and f.read() == data[-10:]
        assert f.read(5) == b""  # at the end
        f.seek(100)
        assert f.seek(20, os.SEEK_CUR) == 120 and f.read(16) == data[120:136]
        with pytest.raises(ValueError, match="invalid seek"):
            f.seek(-1)


# -- the crawl's hints ----------------------------------------------------------------------------
class _Recorder:
    """A file object that records every read h5py makes."""

    def __init__(self, path: Path) -> None:
        self._f = path.open("rb")
        self.reads: list[tuple[int, int]] = []

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readinto(self, buffer: Any) -> int:
        self.reads.append((self._f.tell(), len(buffer)))
        return self._f.readinto(buffer)

    def read(self, n: int = -1) -> bytes:  # h5py recognises file objects by read + seek
        buffer = bytearray(max(n, 0))
        return bytes(buffer[: self.readinto(buffer)])


def crawl(path: Path) -> tuple[set[int], int]:
    """Pages of every structure the hints locate (with all bytes available), and bad hints."""
    data = path.read_bytes()

    def view(start: int, stop: int) -> bytes:
        return data[start:stop]

    layout, todo = hints.find_superblock(view, len(data))
    seen: set[tuple[str, int]] = set()
    pages, bad = {0}, 0
    while todo:
        hint = todo.pop()
        if (hint.kind, hint.addr) in seen:
            continue
        seen.add((hint.kind, hint.addr))
        pages.update(range(hint.addr // PAGE, (hint.addr + hint.size - 1) // PAGE + 1))
        try:
            todo += hints.expand(hint, view, layout)
        except hints.BadStructure:
            bad += 1
    return pages, bad


def _pages_read(path: Path) -> set[int]:
    recorder = _Recorder(path)
    scan(recorder, values=False)
    return {
        p for off, n in recorder.reads if n for p in range(off // PAGE, (off + n - 1) // PAGE + 1)
    }


def test_hints_locate_every_page_hdf5_reads(granule: Path) -> None:
    read = _pages_read(granule)
    located, bad = crawl(granule)
    assert bad == 0
    assert read <= located, f"pages read but not located: {sorted(read - located)}"
    assert len(located) < 1.2 * len(read) + 4  # and little else


def test_hints_locate_every_page_of_an_atl03_like_scan(atl03: Path) -> None:
    read = _pages_read(atl03)
    located, bad = crawl(atl03)
    assert bad == 0 and read <= located
    assert len(located) < 1.05 * len(read)


@pytest.mark.corpus
def test_hints_are_safe_on_the_corpus(corpus_dir: Path) -> None:
    manifest = json.loads((corpus_dir / "MANIFEST.json").read_text())
    coverage = []
    for entry in manifest["files"]:
        if not entry["hdf5"]:
            continue
        path = corpus_dir / "files" / entry["name"]
        located, _ = crawl(path)  # never raises: bad guesses are dropped
        recorder = _Recorder(path)
        with h5py.File(recorder, "r") as f:
            f.visit(lambda name: None)  # names only: some corpus objects h5py cannot open
        read = {
            p
            for off, n in recorder.reads
            if n
            for p in range(off // PAGE, (off + n - 1) // PAGE + 1)
        }
        coverage.append(len(read & located) / len(read))
    assert np.mean(coverage) > 0.97  # the pages of ~99% of the reads (name traversal)
