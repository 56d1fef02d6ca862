"""Smoke test of the benchmark S3 endpoint (benchmarks/s3server.py) with s3fs, obstore and boto3.

The server is only a benchmark tool, but the numbers it produces are only worth something if
the clients we benchmark talk to it exactly as they talk to S3: listing with pagination and
delimiters, ranged GETs, conditional requests, PUT/DELETE, and honest request/byte counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest

from benchmarks._s3proto import in_a_row, list_page
from benchmarks.s3server import get_stats, reset_stats, start_server
from h5sidecar.sample import write_atl03_like

BUCKET = "granules"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("s3root")
    folder = root / BUCKET
    (folder / "a" / "deep").mkdir(parents=True)
    for i in range(12):
        (folder / "a" / f"k{i:02d}.bin").write_bytes(bytes([i]) * (i + 1))
    (folder / "a" / "deep" / "x.bin").write_bytes(b"deep")
    (folder / "blob.bin").write_bytes(np.random.default_rng(0).bytes(200_000))
    write_atl03_like(folder / "g.h5", photons=3000, seed=2)
    url, stop = start_server(root, latency_ms=1)
    try:
        yield url, folder
    finally:
        stop()


def test_s3fs_lists_reads_ranges_and_writes(served: tuple[str, Path]) -> None:
    import s3fs

    url, folder = served
    fs = s3fs.S3FileSystem(anon=True, endpoint_url=url, skip_instance_cache=True)
    assert sorted(fs.ls(BUCKET)) == [f"{BUCKET}/{n}" for n in ("a", "blob.bin", "g.h5")]
    assert len(fs.find(f"{BUCKET}/a")) == 13
    blob = (folder / "blob.bin").read_bytes()
    info = fs.info(f"{BUCKET}/blob.bin")
    assert info["size"] == len(blob) and info["ETag"].startswith('"')
    assert fs.cat_file(f"{BUCKET}/blob.bin", start=1234, end=98765) == blob[1234:98765]
    fs.pipe(f"{BUCKET}/new/obj", b"payload")
    assert (folder / "new" / "obj").read_bytes() == b"payload"
    fs.rm(f"{BUCKET}/new/obj")
    assert not (folder / "new" / "obj").exists()


def test_h5py_over_s3fs_reads_what_h5py_reads_locally(served: tuple[str, Path]) -> None:
    import s3fs

    url, folder = served
    fs = s3fs.S3FileSystem(anon=True, endpoint_url=url, skip_instance_cache=True)
    with fs.open(f"{BUCKET}/g.h5", "rb", block_size=2**16) as remote, \
            h5py.File(remote, "r") as fr, h5py.File(folder / "g.h5", "r") as fl:
        for name in ("gt1l/heights/h_ph", "gt3r/geolocation/segment_id",
                     "ancillary_data/data_start_utc"):
            assert np.array_equal(fr[name][:], fl[name][:])


def test_obstore_heads_lists_and_gets_ranges(served: tuple[str, Path]) -> None:
    import obstore
    from obstore.store import S3Store

    url, folder = served
    store = S3Store(BUCKET, endpoint=url, skip_signature=True, region="us-east-1",
                    client_options={"allow_http": True})
    blob = (folder / "blob.bin").read_bytes()
    assert obstore.head(store, "blob.bin")["size"] == len(blob)
    got = obstore.get_ranges(store, "blob.bin", starts=[0, 70_000, 199_990],
                             ends=[10, 90_000, 200_000])
    assert [bytes(b) for b in got] == [blob[:10], blob[70_000:90_000], blob[199_990:]]
    listed = obstore.list_with_delimiter(store, prefix="a")
    assert listed["common_prefixes"] == ["a/deep"]
    assert len(listed["objects"]) == 12
    assert sum(len(batch) for batch in obstore.list(store, prefix="a/")) == 13


def test_boto3_pagination_conditions_and_errors(served: tuple[str, Path]) -> None:
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    from botocore.exceptions import ClientError

    url, folder = served
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                      config=Config(signature_version=UNSIGNED))
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix="a/", Delimiter="/", PaginationConfig={"PageSize": 5})
    keys, prefixes = [], []
    for page in pages:
        keys += [o["Key"] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    assert keys == [f"a/k{i:02d}.bin" for i in range(12)] and prefixes == ["a/deep/"]
    blob = (folder / "blob.bin").read_bytes()
    r = s3.get_object(Bucket=BUCKET, Key="blob.bin", Range="bytes=-100")
    assert r["Body"].read() == blob[-100:]
    assert r["ContentRange"] == f"bytes {len(blob) - 100}-{len(blob) - 1}/{len(blob)}"
    etag = r["ETag"]
    assert s3.get_object(Bucket=BUCKET, Key="blob.bin", IfMatch=etag, Range="bytes=0-3")[
        "Body"].read() == blob[:4]
    with pytest.raises(ClientError, match="PreconditionFailed"):
        s3.get_object(Bucket=BUCKET, Key="blob.bin", IfMatch='"0123"')
    with pytest.raises(ClientError, match="InvalidRange"):
        s3.get_object(Bucket=BUCKET, Key="blob.bin", Range=f"bytes={len(blob)}-")
    with pytest.raises(ClientError, match="NoSuchKey"):
        s3.get_object(Bucket=BUCKET, Key="missing.bin")


def test_counters_count_requests_and_bytes(served: tuple[str, Path]) -> None:
    import s3fs

    url, _ = served
    fs = s3fs.S3FileSystem(anon=True, endpoint_url=url, skip_instance_cache=True)
    reset_stats(url)
    ranges = [(0, 100), (5000, 5500), (150_000, 200_000)]
    for start, end in ranges:
        fs.cat_file(f"{BUCKET}/blob.bin", start=start, end=end)
    stats = get_stats(url)
    assert stats["ops"] == {"GetObject": 3}
    assert stats["bytes_out"] == sum(end - start for start, end in ranges)
    assert reset_stats(url)["requests"] == 3
    assert get_stats(url)["requests"] == 0


@pytest.mark.parametrize("delimiter", ["", "/"])
@pytest.mark.parametrize("page_size", [1, 2, 3, 1000])
def test_list_pages_concatenate_to_the_full_listing(delimiter: str, page_size: int) -> None:
    keys = sorted(["a", "b/1", "b/2", "b/c/3", "c", "d/4", "d/5", "e"])
    whole = list_page(keys, prefix="", delimiter=delimiter, after="", max_keys=10_000,
                      resume_rolled_up=False)
    got_keys: list[str] = []
    got_prefixes: list[str] = []
    after, token = "", False
    while True:
        page = list_page(keys, prefix="", delimiter=delimiter, after=after, max_keys=page_size,
                         resume_rolled_up=token)
        got_keys += page.keys
        got_prefixes += page.prefixes
        if not page.truncated:
            break
        after, token = page.last, True
    assert (got_keys, got_prefixes) == (whole.keys, whole.prefixes)
    assert whole.prefixes == (["b/", "d/"] if delimiter else [])


def test_in_a_row_counts_requests_that_ran_one_after_another() -> None:
    assert in_a_row([]) == 0
    assert in_a_row([(0, 1), (1, 2), (2, 3)]) == 3  # a chain: each waited for the last
    assert in_a_row([(0, 1), (0, 1), (0.5, 1.5)]) == 1  # concurrent: one round trip
    assert in_a_row([(0, 1), (0.2, 0.4), (0.5, 0.6), (1, 2)]) == 3


def test_costly_endpoint_serves_few_requests_at_once(tmp_path: Path) -> None:
    import concurrent.futures
    import time

    import s3fs

    (tmp_path / BUCKET).mkdir()
    (tmp_path / BUCKET / "blob.bin").write_bytes(bytes(range(256)) * 40)
    url, stop = start_server(tmp_path, request_cost_ms=150, max_concurrent=2)
    try:
        fs = s3fs.S3FileSystem(anon=True, endpoint_url=url, skip_instance_cache=True)
        fs.cat_file(f"{BUCKET}/blob.bin", start=0, end=10)  # connect before timing
        reset_stats(url)
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda i: fs.cat_file(f"{BUCKET}/blob.bin", start=i,
                                                      end=i + 10), range(8)))
        took = time.perf_counter() - t0
        stats = get_stats(url)
    finally:
        stop()
    assert got == [(bytes(range(256)) * 40)[i:i + 10] for i in range(8)]
    assert took >= 4 * 0.150  # 8 requests, 2 at a time, 150 ms each
    # asked together: queueing on the server's slots is not the client waiting in a row.
    # Counted from when a slot served them, 2 at a time, they would be 4 in a row; from
    # their arrival, 1 (2 when a loaded machine starts the client's threads late)
    assert stats["requests"] == 8 and stats["in_a_row"] < 4
