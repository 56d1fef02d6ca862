"""The fetch executor against real parts: moto S3 (directly and behind a fault proxy), local files.

The oracle for every byte is h5py: ``read_direct_chunk`` returns a chunk's stored bytes, which
is exactly what a chunk reference's ``(offset, length)`` must fetch.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.credentials import scrub_credentials
from h5sidecar.errors import (
    ForbiddenSourceError,
    InvalidReferenceError,
    SourceReadError,
    StaleReferenceError,
)
from h5sidecar.references import SourceInfo
from h5sidecar.settings import ReadSettings
from h5sidecar.sources._source_identity import identity_from_stat, source_identity
from h5sidecar.sources.fetch._chunk_fetcher import ChunkFetcher
from tests.faultproxy import FaultProxy

#: fast retries so fault tests take milliseconds; small limits so plans have several requests
FAST = ReadSettings(max_gap=512, max_request=16 * 1024, retries=3, backoff=0.001)


# -- fixtures ------------------------------------------------------------------------------------
def make_granule(path: Path) -> list[tuple[int, int, bytes]]:
    """A small chunked, gzip'd HDF5 file; returns (offset, size, stored bytes) of every chunk."""
    rng = np.random.default_rng(42)
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "heights",
            data=rng.normal(size=(64, 500)).astype("f4"),
            chunks=(8, 125),
            compression="gzip",
            shuffle=True,
        )
        f.create_dataset("counts", data=np.arange(30_000, dtype="i4"), chunks=(3000,))
    chunks = []
    with h5py.File(path, "r") as f:
        for name in ("heights", "counts"):
            d = f[name]
            for i in range(d.id.get_num_chunks()):
                info = d.id.get_chunk_info(i)
                _, raw = d.id.read_direct_chunk(info.chunk_offset)
                chunks.append((int(info.byte_offset), int(info.size), bytes(raw)))
    return chunks


@pytest.fixture
def granule(tmp_path: Path) -> tuple[Path, list[tuple[int, int, bytes]]]:
    path = tmp_path / "granule.h5"
    return path, make_granule(path)


@pytest.fixture
def s3_granule(granule, s3, s3_bucket, s3_storage_options):
    path, chunks = granule
    url = f"s3://{s3_bucket}/g/granule.h5"
    s3.put(str(path), url)
    return url, chunks, source_identity(url, s3_storage_options)


@pytest.fixture
def proxied(proxy: FaultProxy, s3_storage_options) -> dict[str, object]:
    """The storage_options a user passes, pointed at the fault proxy."""
    return {**s3_storage_options, "endpoint_url": proxy.url}


def requests_for(url: str, chunks) -> list[tuple[str, int, int]]:
    return [(url, off, n) for off, n, _ in chunks]


# -- S3 ------------------------------------------------------------------------------------------
def test_s3_chunks_equal_h5py_stored_bytes(s3_granule, proxied, proxy):
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=proxied, sources=[info])
    reqs = requests_for(url, chunks)
    got = fetcher.fetch_sync(reqs)
    assert got == [raw for _, _, raw in chunks]
    plan = fetcher.plan(reqs)
    # one GET per planned request reached the server, and nothing else (no HEAD)
    assert len(proxy.requests) == plan.n_requests == fetcher.stats.requests
    assert plan.n_requests < len(reqs)
    assert fetcher.stats.bytes_fetched == plan.bytes_requested
    assert fetcher.stats.bytes_used == sum(n for _, n, _ in chunks)
    assert fetcher.stats.over_read_ratio == pytest.approx(plan.over_read_ratio)
    assert fetcher.stats.retries == 0 and fetcher.stats.freshness_checks == 1


def test_selection_fetches_only_its_requests(s3_granule, proxied, proxy):
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=proxied, sources=[info])
    picked = chunks[3:9:2] + chunks[-2:]
    reqs = requests_for(url, picked)
    assert fetcher.fetch_sync(reqs) == [raw for _, _, raw in picked]
    plan = fetcher.plan(reqs)
    seen = sorted(r.range for r in proxy.gets())
    expected = sorted(f"bytes={a}-{b - 1}" for _, a, b in plan.iter_requests())
    assert seen == expected


def test_large_range_split_into_parts(s3_granule, proxied, proxy):
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(replace(FAST, max_request=4096), storage_options=proxied, sources=[info])
    whole = info.size - 100
    (got,) = fetcher.fetch_sync([(url, 50, whole)])
    assert len(proxy.gets()) == -(-whole // 4096)
    # the bytes of every chunk sit at the right place inside the big range
    for off, n, stored in chunks:
        if off >= 50 and off + n <= 50 + whole:
            assert got[off - 50 : off - 50 + n] == stored


@pytest.mark.parametrize("fault", ["slowdown", "500", "reset", "truncate", "short"])
def test_transient_faults_are_retried(s3_granule, proxied, proxy, fault):
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=proxied, sources=[info])
    proxy.inject(fault, times=2)
    got = fetcher.fetch_sync(requests_for(url, chunks[:5]))
    assert got == [raw for _, _, raw in chunks[:5]]
    assert fetcher.stats.retries == 2
    assert [r.fault for r in proxy.gets()].count(fault) == 2


@pytest.mark.parametrize("fault", ["slowdown", "reset", "short"])
def test_persistent_faults_raise_source_read_error(s3_granule, proxied, proxy, fault, caplog):
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=proxied, sources=[info])
    proxy.inject(fault, times=1000)
    with (
        caplog.at_level(logging.DEBUG, logger="h5sidecar.fetch"),
        pytest.raises(SourceReadError, match=r"failed 4 times.*retry later") as err,
    ):
        fetcher.fetch_sync([(url, chunks[0][0], chunks[0][1])])
    assert err.value.url == url
    assert len(proxy.gets()) == FAST.retries + 1
    assert sum("attempt" in m for m in caplog.messages) == FAST.retries + 1


@pytest.mark.parametrize("fault", ["shift", "relabel", "superset", "whole"])
def test_another_range_than_asked_is_refused_at_once(s3_granule, proxied, proxy, fault):
    # obstore compares Content-Range with the range asked for: a server that answers other
    # bytes (and says so, or lies) would answer them again, so there is no retry
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=proxied, sources=[info])
    proxy.inject(fault, times=1000)
    with pytest.raises(SourceReadError, match="another byte range") as err:
        fetcher.fetch_sync([(url, chunks[0][0], chunks[0][1])])
    assert err.value.url == url
    assert len(proxy.gets()) == 1 and fetcher.stats.retries == 0
    proxy.clear()
    assert fetcher.fetch_sync([(url, chunks[0][0], chunks[0][1])]) == [chunks[0][2]]


def test_a_body_longer_than_its_range_is_refused(s3_granule, proxied, proxy):
    # obstore does not count the body: the executor does (retried, as a short body is)
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=proxied, sources=[info])
    proxy.inject("long", times=1000)
    with pytest.raises(SourceReadError, match="short read: got"):
        fetcher.fetch_sync([(url, chunks[0][0], chunks[0][1])])
    proxy.clear()
    proxy.inject("long", times=1)
    assert fetcher.fetch_sync([(url, chunks[0][0], chunks[0][1])]) == [chunks[0][2]]


def test_forbidden_status_is_not_retried(s3_granule, proxied, proxy):
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=proxied, sources=[info])
    proxy.inject("403", times=1000)
    with pytest.raises(SourceReadError, match="denied"):
        fetcher.fetch_sync([(url, chunks[0][0], chunks[0][1])])
    assert len(proxy.gets()) == 1 and fetcher.stats.retries == 0


def test_replaced_object_is_stale(s3_granule, proxied, proxy, s3, granule):
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=proxied, sources=[info])
    assert fetcher.fetch_sync(requests_for(url, chunks[:1])) == [chunks[0][2]]
    # same size, different bytes: only the ETag tells
    s3.pipe(url, bytes(reversed(granule[0].read_bytes())))
    with pytest.raises(StaleReferenceError, match=r"granule s3://.*re-index it") as err:
        fetcher.fetch_sync(requests_for(url, chunks[:1]))
    assert err.value.url == url
    s3.rm(url)
    with pytest.raises(StaleReferenceError, match="does not exist"):
        fetcher.fetch_sync(requests_for(url, chunks[:1]))


def test_freshness_check_can_be_disabled(s3_granule, s3_storage_options, s3):
    url, chunks, info = s3_granule
    old = SourceInfo(url, info.size, etag="0" * 32)
    lax = ChunkFetcher(
        replace(FAST, check_freshness=False), storage_options=s3_storage_options, sources=[old]
    )
    assert lax.fetch_sync(requests_for(url, chunks[:2])) == [c[2] for c in chunks[:2]]
    strict = ChunkFetcher(FAST, storage_options=s3_storage_options, sources=[old])
    with pytest.raises(StaleReferenceError):
        strict.fetch_sync(requests_for(url, chunks[:2]))


@pytest.mark.parametrize(
    "bad",
    [
        "file:///etc/passwd",
        "/etc/passwd",
        "s3://another-bucket/g/granule.h5",
        "http://127.0.0.1:1/x",
        "s3://{bucket}/g/other.h5",
        "s3://{bucket}/g/granule.h5/../../secret",
        "relative/path.h5",
    ],
)
def test_forbidden_urls_are_refused_before_io(s3_granule, proxied, proxy, bad):
    url, _, info = s3_granule
    bad = bad.format(bucket=url.split("/")[2])
    fetcher = ChunkFetcher(FAST, storage_options=proxied, sources=[info])
    with pytest.raises(ForbiddenSourceError, match="refus"):
        fetcher.fetch_sync([(url, 0, 8), (bad, 0, 8)])
    assert proxy.requests == []


def test_allowed_prefixes_replace_sources(s3_granule, s3_storage_options, s3):
    url, _, info = s3_granule
    bucket = url.split("/")[2]
    s3.pipe(f"s3://{bucket}/g2/x.bin", b"0123456789")
    settings = replace(FAST, allowed_prefixes=(f"s3://{bucket}/g2/",))
    fetcher = ChunkFetcher(settings, storage_options=s3_storage_options, sources=[info])
    assert fetcher.fetch_sync([(f"s3://{bucket}/g2/x.bin", 2, 5)]) == [b"23456"]
    with pytest.raises(ForbiddenSourceError):
        fetcher.fetch_sync([(url, 0, 8)])


def test_ranges_past_the_source_or_too_long_are_invalid(s3_granule, proxied, proxy):
    url, _, info = s3_granule
    fetcher = ChunkFetcher(
        replace(FAST, max_range_bytes=1000), storage_options=proxied, sources=[info]
    )
    with pytest.raises(InvalidReferenceError, match="past the end"):
        fetcher.fetch_sync([(url, info.size - 10, 11)])
    with pytest.raises(InvalidReferenceError, match="max_range_bytes"):
        fetcher.fetch_sync([(url, 0, 1001)])
    with pytest.raises(InvalidReferenceError, match="non-negative"):
        fetcher.fetch_sync([(url, -1, 10)])
    assert proxy.requests == []


def test_concurrency_is_bounded(s3_granule, proxied, proxy):
    url, chunks, info = s3_granule
    settings = replace(FAST, max_gap=0, max_request=1024, max_concurrency=2,
                       max_small_concurrency=2)  # fmt: skip
    fetcher = ChunkFetcher(settings, storage_options=proxied, sources=[info])
    assert fetcher.fetch_sync(requests_for(url, chunks[:8])) == [c[2] for c in chunks[:8]]
    assert len(proxy.gets()) > 10
    assert 1 <= proxy.peak_in_flight <= 2


def test_small_requests_have_a_wider_lane(s3, s3_bucket, s3_storage_options, proxied, proxy):
    """Requests of at most 64 KiB (latency-bound) wait in their own, wider lane; larger ones
    stay bounded by ``max_concurrency``."""
    blob = np.random.default_rng(3).integers(0, 256, 2**20, dtype=np.uint8).tobytes()
    url = f"s3://{s3_bucket}/g/blob.bin"
    s3.pipe(url, blob)
    info = source_identity(url, s3_storage_options)
    settings = replace(FAST, max_gap=0, max_request=2**20, max_concurrency=2,
                       max_small_concurrency=8)  # fmt: skip
    fetcher = ChunkFetcher(settings, storage_options=proxied, sources=[info])
    large = [(url, i * 80 * 2**10, 70 * 2**10) for i in range(12)]
    assert fetcher.fetch_sync(large) == [blob[o : o + n] for _, o, n in large]
    assert len(proxy.gets()) == 12
    assert 1 <= proxy.peak_in_flight <= 2
    proxy.clear()
    small = [(url, i * 2**14, 1000) for i in range(48)]
    assert fetcher.fetch_sync(small) == [blob[o : o + n] for _, o, n in small]
    assert len(proxy.gets()) == 48
    assert 2 < proxy.peak_in_flight <= 8


def test_pickles_without_credentials(s3_granule, s3_endpoint):
    url, chunks, info = s3_granule
    options = {
        "endpoint_url": s3_endpoint,
        "key": "AKIDNOTSHIPPED",
        "secret": "S3CR3T-NOT-SHIPPED",
        "token": "TOKEN-NOT-SHIPPED",
        "client_kwargs": {"region_name": "us-east-1"},
    }
    fetcher = ChunkFetcher(FAST, storage_options=options, sources=[info])
    assert fetcher.fetch_sync(requests_for(url, chunks[:2])) == [c[2] for c in chunks[:2]]
    blob = pickle.dumps(fetcher)
    for secret in (b"AKIDNOTSHIPPED", b"S3CR3T-NOT-SHIPPED", b"TOKEN-NOT-SHIPPED"):
        assert secret not in blob
    clone = pickle.loads(blob)
    assert clone.storage_options == {
        "endpoint_url": s3_endpoint,
        "client_kwargs": {"region_name": "us-east-1"},
    }
    # the worker side resolves credentials from its own environment (AWS_* set by the fixture)
    assert clone.fetch_sync(requests_for(url, chunks[2:4])) == [c[2] for c in chunks[2:4]]


def test_scrub_credentials_is_recursive():
    scrubbed = scrub_credentials(
        {
            "anon": False,
            "client_kwargs": {"aws_secret_access_key": "x", "region_name": "r"},
            "password": "p",
            "profile": "default",
        }
    )
    assert scrubbed == {"anon": False, "client_kwargs": {"region_name": "r"}, "profile": "default"}


def test_one_fetcher_serves_zarr_and_fsspec_loops(s3_granule, s3_storage_options):
    from zarr.core.sync import sync as zarr_sync

    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=s3_storage_options, sources=[info])
    reqs = requests_for(url, chunks[:6])
    expected = [c[2] for c in chunks[:6]]
    assert zarr_sync(fetcher.fetch(reqs)) == expected
    assert fetcher.fetch_sync(reqs) == expected


def test_concurrent_fetches_share_the_fetcher(s3_granule, s3_storage_options):
    url, chunks, info = s3_granule
    fetcher = ChunkFetcher(FAST, storage_options=s3_storage_options, sources=[info])

    async def many():
        return await asyncio.gather(
            *(fetcher.fetch(requests_for(url, chunks[i::4])) for i in range(4))
        )

    import fsspec.asyn

    results = fsspec.asyn.sync(fsspec.asyn.get_loop(), many)
    for i, got in enumerate(results):
        assert got == [c[2] for c in chunks[i::4]]


# -- local files ---------------------------------------------------------------------------------
def test_local_chunks_equal_h5py_stored_bytes(granule):
    path, chunks = granule
    info = identity_from_stat(path)
    fetcher = ChunkFetcher(FAST, sources=[info])
    reqs = requests_for(str(path), chunks)
    assert fetcher.fetch_sync(reqs) == [raw for _, _, raw in chunks]
    assert fetcher.stats.requests == fetcher.plan(reqs).n_requests
    # a file:// spelling of the same source is the same source
    assert fetcher.fetch_sync([(path.as_uri(), *reqs[0][1:])]) == [chunks[0][2]]


def test_local_escape_attempts_are_refused(granule, tmp_path):
    path, chunks = granule
    fetcher = ChunkFetcher(replace(FAST, allowed_prefixes=(str(tmp_path / "data"),)))
    (tmp_path / "data").mkdir()
    link = tmp_path / "data" / "link.h5"
    link.symlink_to(path)  # points outside the allowed root
    for bad in (str(link), str(tmp_path / "data" / ".." / path.name), str(tmp_path / "data2")):
        with pytest.raises(ForbiddenSourceError):
            fetcher.fetch_sync([(bad, 0, 8)])
    inside = tmp_path / "data" / "g.h5"
    path.rename(inside)
    assert fetcher.fetch_sync([(str(inside), chunks[0][0], chunks[0][1])]) == [chunks[0][2]]


def test_local_file_rewritten_is_stale(granule):
    path, chunks = granule
    info = identity_from_stat(path)
    fetcher = ChunkFetcher(FAST, sources=[info])
    assert fetcher.fetch_sync(requests_for(str(path), chunks[:1])) == [chunks[0][2]]
    with path.open("ab") as f:
        f.write(b"appended")
    with pytest.raises(StaleReferenceError, match="re-index it"):
        fetcher.fetch_sync(requests_for(str(path), chunks[:1]))
    path.unlink()
    with pytest.raises(StaleReferenceError, match="does not exist"):
        fetcher.fetch_sync(requests_for(str(path), chunks[:1]))


def test_empty_and_duplicate_requests(granule):
    path, chunks = granule
    fetcher = ChunkFetcher(FAST, sources=[identity_from_stat(path)])
    off, n, raw = chunks[0]
    got = fetcher.fetch_sync([(str(path), off, n), (str(path), 0, 0), (str(path), off, n)])
    assert got == [raw, b"", raw]
    assert fetcher.stats.requests == 1
    assert fetcher.fetch_sync([]) == []


@pytest.mark.parametrize(
    "change", [{"max_concurrency": 0}, {"max_small_concurrency": 0}, {"retries": -1}, {"max_request": 0}, {"backoff": -0.5}]
)
def test_unusable_settings_are_refused(change):
    with pytest.raises(ValueError, match=next(iter(change))):
        ChunkFetcher(replace(FAST, **change))


@pytest.mark.parametrize("check", [True, False])
def test_truncated_object_is_stale_not_flaky(s3_granule, s3_storage_options, s3, check):
    url, chunks, info = s3_granule
    settings = replace(FAST, check_freshness=check)
    fetcher = ChunkFetcher(settings, storage_options=s3_storage_options, sources=[info])
    s3.pipe(url, b"\x89HDF\r\n\x1a\n" + bytes(92))  # the granule shrank to 100 bytes
    last = chunks[-1]
    with pytest.raises(StaleReferenceError, match="re-index"):
        fetcher.fetch_sync([(url, last[0], last[1])])
    assert fetcher.stats.retries == 0
