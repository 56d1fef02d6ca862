"""Fault and abuse cases of the indexer and the batch: corrupt granules over S3, bounds, blocking
sources, interrupts, a dead parent, chunk references past the end, a server that changes ETags.

Each case ends in seconds: a hang is a failure (per-test timeouts).  The longer soak over many
corrupt granules is ``benchmarks/soak_index.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import h5py
import numpy as np
import psutil
import pytest

from benchmarks.s3server import start_server
from h5sidecar.errors import NotHDF5Error, SourceNotFoundError, StaleReferenceError
from h5sidecar.indexer import index_granule
from h5sidecar.indexer.crawl._dense_hints import _btree2_widths, _eaib_block_sizes
from h5sidecar.indexer.crawl._hints import BadStructure
from h5sidecar.indexer.crawl._source_file import open_source
from h5sidecar.sample import flip_bits, write_atl03_like
from h5sidecar.settings import IndexSettings
from h5sidecar.workflows import index_many, list_granules, read_report, verify_refs
from h5sidecar.workflows.index._executors import Task, run_tasks
from h5sidecar.workflows.index._index_one import IndexOptions, index_one
from tests._cli_launch import h5sidecar_command
from tests.conftest import S3_CREDENTIALS, free_port
from tests.workflows.conftest import open_plain

#: Kinds a corrupt granule may fail with (never ``timeout``/``limit_exceeded`` in these cases:
#: they must end on their own, quickly; never ``bug``: garbled names and attribute values are
#: kept by the indexer).
CLEAN_KINDS = {"not_hdf5", "corrupt", "unsupported", "source_read", "invalid_reference"}




SAMPLE_VARIABLES = ("gt1l/heights/h_ph", "gt1l/heights/delta_time", "gt2r/geolocation/segment_id",
                    "ancillary_data/atlas_sdp_gps_epoch")


def assert_matches_h5py(sidecar: str, source: Path, names: tuple[str, ...] = SAMPLE_VARIABLES
                        ) -> None:
    """``names`` read through the sidecar with plain fsspec + zarr equal h5py's values."""
    group = open_plain(sidecar)
    with h5py.File(source, "r") as f:
        for name in names:
            np.testing.assert_array_equal(np.asarray(group[name][()]), f[name][()], err_msg=name)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smallest ATL03-like granule (about 2.6 MB: moto copies it on every ranged GET)."""
    return write_atl03_like(tmp_path_factory.mktemp("sample") / "ATL03.h5", photons=1000)


# -- 1. corrupt granules over S3 ------------------------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", [5, 8])  # both hung forever over S3 (the crawl's page walk)
def test_bit_flipped_granule_over_s3_fails_in_seconds(
    seed: int, sample: Path, s3, s3_bucket: str, s3_storage_options: dict[str, object]  # type: ignore[no-untyped-def]
) -> None:
    key = f"{s3_bucket}/bad{seed}.h5"
    s3.pipe(key, flip_bits(sample.read_bytes(), seed))
    settings = IndexSettings(max_granule_seconds=60)
    options = IndexOptions(format="json", settings=settings, storage_options=s3_storage_options)
    t0 = time.monotonic()
    url, sidecar = f"s3://{key}", f"s3://{s3_bucket}/out/bad{seed}.h5.json"
    task = Task(url, sidecar, (url, sidecar, options, None))
    [result] = run_tasks(index_one, [task], "serial", workers=1)  # as a batch runs it
    took = time.monotonic() - t0
    assert took < 30, took  # it ends on its own, far inside the time limit
    assert result.status in ("failed", "ok")
    if result.status == "failed":
        assert result.error is not None and result.error.kind in CLEAN_KINDS, result.error


def test_crawl_parsers_bound_corrupt_counts() -> None:
    # a corrupt extensible-array header made the crawl build a list of 2**500 block sizes
    assert _eaib_block_sizes(4, 508)[:6] == [4, 8, 8, 8, 16, 16]  # as H5EA__hdr_init
    assert len(_eaib_block_sizes(4, 508)) == 508
    with pytest.raises(BadStructure):  # a B-tree 65,535 levels deep is a corrupt header
        _btree2_widths(512, 16, 65535, 8)


def test_read_bounds_fail_the_granule_with_their_kind(sample: Path, tmp_path: Path) -> None:
    reads = IndexOptions(format="json", settings=IndexSettings(max_hdf5_reads=100))
    res = index_one(str(sample), str(tmp_path / "a.json"), reads)
    assert res.status == "failed" and res.error is not None
    assert res.error.kind == "limit_exceeded" and "max_hdf5_reads" in res.error.message
    nbytes = IndexOptions(format="json", settings=IndexSettings(max_hdf5_read_bytes=100_000))
    res = index_one(str(sample), str(tmp_path / "b.json"), nbytes)
    assert res.error is not None and res.error.kind == "limit_exceeded"
    quick = IndexOptions(format="json", settings=IndexSettings(max_granule_seconds=1e-6))
    res = index_one(str(sample), str(tmp_path / "c.json"), quick)
    assert res.error is not None and res.error.kind == "timeout"
    assert "max_granule_seconds" in res.error.message
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "c.json").exists()
    # the defaults leave a sound granule alone
    ok = index_one(str(sample), str(tmp_path / "d.json"), IndexOptions(format="json"))
    assert ok.status == "ok"
    assert_matches_h5py(str(tmp_path / "d.json"), sample)


# -- 2. blocking sources, interrupts, a dead parent -----------------------------------------------
@pytest.mark.timeout(60)
def test_fifo_in_the_source_folder_is_left_out_and_reported(sample: Path, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(sample, src / "a.h5")
    os.mkfifo(src / "pipe.h5")  # opening it for reading would block until a writer comes
    (src / "link.h5").symlink_to(src / "a.h5")  # a symlink to a regular file is one
    (src / "dangling.h5").symlink_to(src / "gone.h5")
    report = index_many(str(src), str(tmp_path / "out"), executor="serial")
    assert report.ok and [g.name for g in report.granules] == ["a.h5", "link.h5"]
    odd = sorted([str(src / "dangling.h5"), str(src / "pipe.h5")])
    assert sorted(report.options["not_regular_files"]) == odd
    assert sorted(read_report(str(tmp_path / "out")).options["not_regular_files"]) == odd
    assert_matches_h5py(report.granules[0].sidecar, src / "a.h5")


@pytest.mark.timeout(30)
def test_a_fifo_is_refused_at_open_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.h5")
    with pytest.raises(NotHDF5Error, match="FIFO"), open_source(tmp_path / "pipe.h5"):
        pass


def sleepy(url: str, sidecar: str, options: object, listed: object) -> object:
    """A picklable task stuck where no Python check runs (sleeps far past any limit)."""
    from h5sidecar.workflows import GranuleResult

    if url.endswith("stuck"):
        time.sleep(600)
    return GranuleResult(url=url, sidecar=sidecar, status="ok", n_chunks=os.getpid())


@pytest.mark.timeout(60)
def test_a_worker_stuck_past_the_time_limit_is_ended() -> None:
    urls = ["/a", "/b-stuck", "/c", "/d"]
    tasks = [Task(u, u + ".parq", (u, u + ".parq", None, None)) for u in urls]
    t0 = time.monotonic()
    # the clock starts at submission, so the limit leaves room for starting the fork server
    results = {r.url: r for r in run_tasks(sleepy, tasks, "process", workers=2, time_limit=8)}
    assert time.monotonic() - t0 < 40
    assert set(results) == set(urls)
    stuck = results.pop("/b-stuck")
    assert stuck.status == "failed" and stuck.error is not None and stuck.error.kind == "timeout"
    assert all(r.status == "ok" for r in results.values())


@pytest.fixture
def slow_s3(sample: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Granules on the benchmark S3 server answering each request after 300 ms: indexing one
    takes many seconds (small granules are not fetched whole here, so every level of their
    metadata is a round trip).  Yields the environment the CLI needs to reach it."""
    root = tmp_path / "s3"
    (root / "slow").mkdir(parents=True)
    for i in range(4):
        shutil.copy(sample, root / "slow" / f"G{i}.h5")
    url, stop = start_server(root, latency_ms=300)
    try:
        yield {**os.environ, **S3_CREDENTIALS, "AWS_ENDPOINT_URL": url, "AWS_ALLOW_HTTP": "true",
               "H5SIDECAR_SOURCE_WHOLE_OBJECT_BYTES": "0"}
    finally:
        stop()


def _session(pid: int) -> list[psutil.Process]:
    """Processes of the session led by ``pid`` (the CLI started with ``start_new_session``)."""
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == pid:
                out.append(proc)
        except (ProcessLookupError, PermissionError):
            continue
    return out


def _start_index(env: dict[str, str], dest: Path, *extra: str) -> subprocess.Popen[str]:
    cmd = h5sidecar_command("index", "s3://slow/", "-o", str(dest), "--workers", "2", *extra)
    return subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_workers(proc: subprocess.Popen[str], n: int) -> None:
    deadline = time.monotonic() + 60
    while len(_session(proc.pid)) < 1 + n:  # the CLI, the fork server, the workers
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(1.0)  # the workers are now inside their first granule


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_index_within_seconds(
    sig: signal.Signals, slow_s3: dict[str, str], tmp_path: Path
) -> None:
    proc = _start_index(slow_s3, tmp_path / "out")
    _wait_for_workers(proc, 2)
    t0 = time.monotonic()
    proc.send_signal(sig)  # the CLI only, not its process group: it must end its workers
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 10, err
    assert proc.returncode == 130, err
    report = read_report(str(tmp_path / "out"))
    assert not report.complete and not report.ok
    deadline = time.monotonic() + 10
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _session(proc.pid)  # no worker, fork server or resource tracker left


@pytest.mark.timeout(120)
def test_workers_exit_when_the_batch_is_killed(slow_s3: dict[str, str], tmp_path: Path) -> None:
    proc = _start_index(slow_s3, tmp_path / "out")
    _wait_for_workers(proc, 2)
    proc.kill()  # SIGKILL to the CLI alone: nothing of it runs any more
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 15
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _session(proc.pid), [p.cmdline() for p in _session(proc.pid)]


@pytest.mark.timeout(120)
def test_a_slow_granule_fails_with_timeout(slow_s3: dict[str, str], tmp_path: Path) -> None:
    env = {**slow_s3, "H5SIDECAR_MAX_GRANULE_SECONDS": "2"}
    proc = _start_index(env, tmp_path / "out", "--json")
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err
    report = read_report(str(tmp_path / "out"))
    assert report.complete and report.counts["failed"] == 4
    for g in report.granules:
        assert g.error is not None and g.error.kind == "timeout", g.error
        assert g.seconds.get("total", 0) < 10


# -- 8. chunk references past the end of the file ------------------------------------------------
def _corrupt_chunk_index(path: Path) -> None:
    """A granule whose ``bad`` dataset's chunk index sends chunk 2 past the end of the file."""
    with h5py.File(path, "w") as f:
        f.create_dataset("good", data=np.arange(4000, dtype="i4"), chunks=(1000,))
        f.create_dataset("bad", data=np.arange(4000, dtype="f8"), chunks=(1000,))
    with h5py.File(path, "r") as f:
        offset = f["bad"].id.get_chunk_info(2).byte_offset
    data = bytearray(path.read_bytes())
    at = data.index(int(offset).to_bytes(8, "little"))  # its address in the B-tree node
    data[at : at + 8] = (len(data) + 10_000).to_bytes(8, "little")
    path.write_bytes(bytes(data))


def test_chunk_references_past_the_end_skip_the_variable(tmp_path: Path) -> None:
    src = tmp_path / "g.h5"
    _corrupt_chunk_index(src)
    with h5py.File(src, "r") as f:  # HDF5 itself hands the bad address over
        assert f["bad"].id.get_chunk_info(2).byte_offset > src.stat().st_size
    refs = index_granule(str(src))
    assert set(refs.arrays) == {"good"}
    [skip] = refs.skipped
    assert skip.path == "bad" and skip.kind == "unreadable"
    assert "corrupt chunk index" in skip.reason and "chunk (2,)" in skip.reason
    report = index_many(str(src), str(tmp_path / "out"), executor="serial")
    assert report.ok and report.granules[0].n_skipped == 1
    sidecar = report.granules[0].sidecar
    assert_matches_h5py(sidecar, src, ("good",))  # the variable kept is right
    checked = verify_refs(sidecar, sample=0)
    assert checked.ok
    assert {v.path: v.status for v in checked.variables} == {"good": "ok", "bad": "skipped"}


# -- 10. a server that ignores If-Match and changes the ETag ---------------------------------------
class _FlakyETag(BaseHTTPRequestHandler):
    """GET with Range for one object; the ETag changes after the first response and
    ``If-Match`` is ignored (what a non-conforming store or cache does)."""

    data = b""
    served = 0

    def do_GET(self) -> None:
        cls = type(self)
        first, last = self.headers["Range"].removeprefix("bytes=").split("-")
        start, stop = int(first), min(int(last) + 1, len(cls.data))
        body = cls.data[start:stop]
        etag = '"v1"' if cls.served == 0 else '"v2"'
        cls.served += 1
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(cls.data)}")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", "Tue, 24 Nov 2026 06:00:00 GMT")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.timeout(60)
def test_an_etag_change_in_a_response_is_noticed(sample: Path) -> None:
    _FlakyETag.data, _FlakyETag.served = sample.read_bytes(), 0
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _FlakyETag)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    options = {"endpoint_url": f"http://127.0.0.1:{server.server_port}", "key": "k",
               "secret": "s", "client_kwargs": {"region_name": "us-east-1"}}
    try:
        small = IndexSettings(metadata_block_size=65536)
        with pytest.raises(StaleReferenceError, match="ETag"):
            index_granule("s3://bucket/ATL03.h5", storage_options=options, settings=small)
    finally:
        server.shutdown()
        server.server_close()


def rlimit_task(url: str, sidecar: str, options: object, listed: object) -> object:
    """A picklable task reporting its process's data-memory limit."""
    import resource

    from h5sidecar.workflows import GranuleResult

    limit = resource.getrlimit(resource.RLIMIT_DATA)[0]
    return GranuleResult(url=url, sidecar=sidecar, status="ok", n_chunks=limit)


def test_workers_run_under_the_memory_limit() -> None:
    # a corrupt granule made HDF5 allocate (and touch) 4.3 GB for one structure
    task = Task("/a", "/a.parq", ("/a", "/a.parq", None, None))
    [res] = run_tasks(rlimit_task, [task], "process", workers=1, memory_limit=3 * 2**30)
    assert res.n_chunks == 3 * 2**30
    assert IndexSettings().max_worker_memory == 4 * 2**30


# -- 10. DEST equal to SOURCE ----------------------------------------------------------------------
@pytest.mark.parametrize("patterns", [("*.h5",), ("*",)])
def test_dest_equal_to_source_says_so(
    patterns: tuple[str, ...], sample: Path, tmp_path: Path
) -> None:
    shutil.copy(sample, tmp_path / "a.h5")
    with pytest.raises(SourceNotFoundError) as info:
        index_many(str(tmp_path), str(tmp_path), patterns=patterns, executor="serial")
    message = str(info.value)
    assert "DEST outside SOURCE" in message and "--pattern" not in message


def test_nothing_found_with_pattern_star_does_not_suggest_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(SourceNotFoundError) as info:
        list_granules(str(tmp_path), patterns=("*",))
    assert "--pattern" not in str(info.value) and "no regular files" in str(info.value)
    with pytest.raises(SourceNotFoundError, match="--pattern"):
        list_granules(str(tmp_path))
