"""The batch workflow and the analysis on a real Dask cluster: a ``LocalCluster`` of two worker
processes reading and writing on the moto S3 server."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import h5sidecar
from h5sidecar.cli import main
from h5sidecar.dest._report import ErrorRecord
from h5sidecar.errors import InvalidRequestError
from h5sidecar.examples.grid_cells import bin_cells
from h5sidecar.workflows import (
    DaskExecutor,
    GranuleResult,
    dask_client,
    gridded_mean_height,
    index_many,
    index_one,
    plot_grid,
    read_report,
)
from h5sidecar.workflows.index._dask import WORKER_MMAP_THRESHOLD, _decode_env, _worker_environ

#: the cluster checks run in one test: a LocalCluster per xdist worker would be too many
#: processes for two cores

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
PHOTONS = 12_000


@pytest.fixture(scope="module")
def cluster(s3_endpoint: str) -> Iterator[Any]:
    """``local:2``: two single-threaded worker processes (started after the moto fixture put
    the test credentials in the environment, which the workers inherit)."""
    with dask_client("local:2") as client:
        client.wait_for_workers(2, timeout=120)
        yield client


@pytest.fixture(scope="module")
def bucket_granules(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory
                    ) -> tuple[str, dict[str, Path]]:
    """Two good ATL03-like granules and a corrupt one under ``s3://<bucket>/src/``."""
    import s3fs

    from h5sidecar.sample import granule_name, write_atl03_like

    local = tmp_path_factory.mktemp("dask-src")
    good = {granule_name(s): write_atl03_like(local / granule_name(s), photons=PHOTONS, seed=s)
            for s in (1, 2)}
    bad = local / "ATL03_corrupt.h5"
    data = bytearray(next(iter(good.values())).read_bytes()[:50_000])
    data[8:48] = b"\xff" * 40  # superblock addresses are garbage
    bad.write_bytes(bytes(data))
    bucket = f"dask-{uuid.uuid4().hex[:10]}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url=s3_endpoint)
    fs.mkdir(bucket)
    for path in [*good.values(), bad]:
        fs.put_file(str(path), f"{bucket}/src/{path.name}")
    return bucket, good


@pytest.fixture(scope="module")
def indexed_on_cluster(cluster: Any, bucket_granules: tuple[str, dict[str, Path]],
                       s3_endpoint: str) -> Any:
    bucket, _ = bucket_granules
    ex = DaskExecutor(cluster, retries=1, backoff=0.1)
    # JSON sidecars: one GET each (a Parquet sidecar is a file per array, slow on moto)
    return index_many(f"s3://{bucket}/src", f"s3://{bucket}/refs", executor=ex, format="json",
                      workers=ex.n_threads, storage_options={"endpoint_url": s3_endpoint})


def check_cluster_indexes_a_prefix_and_isolates_the_corrupt_granule(
        indexed_on_cluster: Any, bucket_granules: tuple[str, dict[str, Path]],
        s3_endpoint: str) -> None:
    bucket, good = bucket_granules
    report = indexed_on_cluster
    by_name = {g.name: g for g in report.granules}
    assert set(by_name) == {*good, "ATL03_corrupt.h5"}
    assert by_name["ATL03_corrupt.h5"].status == "failed"
    error = by_name["ATL03_corrupt.h5"].error
    assert error is not None
    # the whole message (a ProcessDied names the child's exit status or signal), not a repr
    # that pytest cuts short
    assert error.kind == "not_hdf5", f"{error.kind}: {error.message}"
    assert not report.ok and report.counts == {"ok": 2, "failed": 1, "up_to_date": 0}
    assert report.options["executor"] == "DaskExecutor"
    opts = {"endpoint_url": s3_endpoint}
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
    # the record the client wrote to S3 (parts of DEST's record) holds the cluster's results
    assert fs.ls(f"{bucket}/refs/_h5sidecar_record")
    assert read_report(f"s3://{bucket}/refs", storage_options=opts).counts == report.counts
    for name, path in good.items():
        g = by_name[name]
        assert g.status == "ok" and g.seconds["attempts"] == 1.0
        ds = h5sidecar.open_dataset(g.sidecar, group="gt1l/heights", storage_options=opts)
        with h5py.File(path) as f:
            np.testing.assert_array_equal(ds["h_ph"].values, f["gt1l/heights/h_ph"][:])


def _h5py_grid(paths: list[Path], grid: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same binning done with h5py on the files, all at once."""
    h, lat, lon = [], [], []
    for p in paths:
        with h5py.File(p) as f:
            for b in BEAMS:
                h.append(f[f"{b}/heights/h_ph"][:])
                lat.append(f[f"{b}/heights/lat_ph"][:])
                lon.append(f[f"{b}/heights/lon_ph"][:])
    return bin_cells(np.concatenate(h), np.concatenate(lat), np.concatenate(lon), grid)


def check_gridded_mean_height_on_the_cluster_equals_h5py(
        cluster: Any, indexed_on_cluster: Any, bucket_granules: tuple[str, dict[str, Path]],
        s3_endpoint: str, tmp_path: Path) -> None:
    bucket, good = bucket_granules
    ds = gridded_mean_height(f"s3://{bucket}/refs", grid=0.05, client=cluster,
                             storage_options={"endpoint_url": s3_endpoint})
    cells, sums, counts = _h5py_grid(list(good.values()), 0.05)
    assert ds.attrs["granules"] == 2 and ds.attrs["groups"] == 12
    assert ds.attrs["photons"] == int(counts.sum()) > 0
    n_lon = round(360 / 0.05)
    lat_idx = np.round((ds["lat"].values + 90) / 0.05 - 0.5).astype(int)
    lon_idx = np.round((ds["lon"].values + 180) / 0.05 - 0.5).astype(int)
    got = ds["count"].values
    flat = (lat_idx[:, None] * n_lon + lon_idx[None, :])[got > 0]
    np.testing.assert_array_equal(np.sort(flat), cells)
    order = np.argsort((lat_idx[:, None] * n_lon + lon_idx[None, :])[got > 0])
    np.testing.assert_array_equal(got[got > 0][order], counts)
    np.testing.assert_allclose(ds["mean_height"].values[got > 0][order], sums / counts,
                               rtol=1e-12)
    assert np.isnan(ds["mean_height"].values[got == 0]).all()
    png = plot_grid(ds, tmp_path / "grid.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "grid.png").read_bytes() == png
    import matplotlib.image

    assert matplotlib.image.imread(tmp_path / "grid.png").shape[:2] == (450, 800)


def test_gridded_mean_height_refuses_bad_grids(tmp_path: Path) -> None:
    for grid in (0, -1.0, float("nan")):
        with pytest.raises(InvalidRequestError, match="positive"):
            gridded_mean_height([str(tmp_path / "x.h5.json")], grid=grid)


# -- retries and crashes: real tasks on the cluster ----------------------------------------------
def flaky(url: str, sidecar: str, counter: str, failures: int, kind: str) -> GranuleResult:
    """Fail with ``kind`` the first ``failures`` calls (counted in a file), then succeed."""
    with open(counter, "a+") as f:
        f.write("x")
        f.seek(0)
        calls = len(f.read())
    if calls <= failures:
        err = ErrorRecord(kind=kind, message=f"call {calls} failed", hint="")
        return GranuleResult(url=url, sidecar=sidecar, status="failed", error=err)
    return GranuleResult(url=url, sidecar=sidecar, status="ok")


def die(url: str, sidecar: str) -> GranuleResult:
    """Kill the worker process running this task (as a crashing HDF5 library would)."""
    os._exit(3)


RETRY_CASES = [
    (2, "source_read", 2, "ok", 3),       # transient: retried until it works
    (5, "source_read", 1, "failed", 2),   # transient, but retries run out
    (1, "not_hdf5", 3, "failed", 1),      # a bad granule is not retried
]


def check_transient_failures_are_retried_on_the_worker(cluster: Any, tmp_path: Path) -> None:
    for k, (failures, kind, retries, status, attempts) in enumerate(RETRY_CASES):
        ex = DaskExecutor(cluster, retries=retries, backoff=0.01)
        counter = tmp_path / f"calls-{k}"
        res = ex.submit(flaky, "s3://b/g.h5", "s3://b/g.h5.json", str(counter), failures,
                        kind).result(timeout=120)
        assert res.status == status and res.seconds["attempts"] == attempts, (k, res)
        assert len(counter.read_text()) == attempts


def check_a_granule_that_kills_its_worker_is_isolated(cluster: Any, tmp_path: Path,
                                                      bucket_granules: Any,
                                                      s3_endpoint: str) -> None:
    from h5sidecar.workflows import IndexOptions

    bucket, good = bucket_granules
    scheduler = cluster.cluster.scheduler
    old = scheduler.allowed_failures
    scheduler.allowed_failures = 0  # the first death marks the task (default: 3 deaths)
    try:
        ex = DaskExecutor(cluster, retries=0)
        name = next(iter(good))
        opts = IndexOptions(format="json", storage_options={"endpoint_url": s3_endpoint})
        crash = ex.submit(die, "s3://b/crash.h5", "s3://b/crash.h5.json")
        fine = ex.submit(index_one, f"s3://{bucket}/src/{name}",
                         str(tmp_path / f"{name}.json"), opts)
        crashed = crash.result(timeout=180)
        assert crashed.status == "failed" and crashed.error.kind == "worker_crashed"
        assert "crash.h5" in crashed.error.message
        assert fine.result(timeout=180).status == "ok"
    finally:
        scheduler.allowed_failures = old
    cluster.wait_for_workers(2, timeout=120)  # the nanny restarted the dead worker


def check_a_granule_looping_in_hdf5_is_bounded(cluster: Any, tmp_path: Path) -> None:
    """HDF5 looping in C holds a worker thread for good: each granule runs in a child process
    of its worker, ended past the limit; a crashing granule costs its child, not the worker."""
    from h5sidecar.settings import IndexSettings
    from tests.workflows.index.test_granule_limits import LIMIT, batch_folder, check_bounded_report

    src = batch_folder(tmp_path / "limits")
    workers = set(cluster.scheduler_info()["workers"])
    t0 = time.monotonic()
    report = index_many(str(src), str(tmp_path / "limits" / "out"), format="json",
                        executor=DaskExecutor(cluster, retries=1), workers=2,
                        settings=IndexSettings(max_granule_seconds=LIMIT))
    check_bounded_report(report, src, time.monotonic() - t0)
    assert set(cluster.scheduler_info()["workers"]) == workers  # no worker died or was lost


def check_cli_index_on_a_running_scheduler(cluster: Any, bucket_granules: Any, s3_endpoint: str,
                                           capsys: Any) -> None:
    bucket, _ = bucket_granules
    rc = main(["index", f"s3://{bucket}/src", "-o", f"s3://{bucket}/cli-refs", "--format",
               "json", "--dask", cluster.scheduler.address, "--json",
               "--storage-option", f"endpoint_url={s3_endpoint}"])
    assert rc == 1  # the corrupt granule failed
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"ok": 2, "failed": 1, "up_to_date": 0}
    assert report["options"]["executor"] == "DaskExecutor" and report["options"]["workers"] == 2


def _worker_state() -> dict[str, Any]:
    from h5sidecar.read.native._decode import decode_executor

    return {**{k: os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_",
                                              "MALLOC_TRIM_THRESHOLD_")},
            "decode pool": decode_executor()._max_workers}


def check_workers_keep_large_buffers_in_the_heap_and_share_the_cpus(cluster: Any) -> None:
    """Workers of a cluster ``dask_client`` starts get the raised mmap threshold beside Dask's
    own trim threshold (both are read by glibc when the process starts), and decode pools
    that together have one thread per CPU."""
    from dask.system import CPU_COUNT

    env = cluster.run(_worker_state)
    assert len(env) == 2
    for got in env.values():
        assert got == {"MALLOC_MMAP_THRESHOLD_": str(WORKER_MMAP_THRESHOLD),
                       "MALLOC_TRIM_THRESHOLD_": "65536",
                       "decode pool": max(1, CPU_COUNT // 2)}


def test_decode_env_shares_the_cpus_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from dask.system import CPU_COUNT

    monkeypatch.delenv("H5SIDECAR_DECODE_THREADS", raising=False)
    assert _decode_env(1) == {"H5SIDECAR_DECODE_THREADS": str(CPU_COUNT)}
    assert _decode_env(CPU_COUNT * 2) == {"H5SIDECAR_DECODE_THREADS": "1"}
    monkeypatch.setenv("H5SIDECAR_DECODE_THREADS", "3")
    assert _decode_env(2) == {}


def test_worker_environ_keeps_a_configured_mmap_threshold() -> None:
    import dask
    import distributed  # noqa: F401  (loads Dask's defaults for its workers)

    key = "distributed.nanny.pre-spawn-environ"
    # Dask's defaults, without what a cluster of this module's (its fixture holds the setting
    # while it lives) or a user configured
    defaults = {k: v for k, v in dask.config.get(key).items() if k != "MALLOC_MMAP_THRESHOLD_"}
    with dask.config.set({key: defaults}):
        assert _worker_environ() == {f"{key}.MALLOC_MMAP_THRESHOLD_": WORKER_MMAP_THRESHOLD}
        with dask.config.set({f"{key}.MALLOC_MMAP_THRESHOLD_": 1 << 20}):
            assert _worker_environ() == {}
            assert dask.config.get(key)["MALLOC_TRIM_THRESHOLD_"] == 65536


@pytest.mark.slow
def test_on_a_local_cluster(cluster: Any, bucket_granules: tuple[str, dict[str, Path]],
                            indexed_on_cluster: Any, s3_endpoint: str, tmp_path: Path,
                            capsys: Any) -> None:
    """Every cluster check, on one LocalCluster of two worker processes."""
    check_workers_keep_large_buffers_in_the_heap_and_share_the_cpus(cluster)
    check_cluster_indexes_a_prefix_and_isolates_the_corrupt_granule(
        indexed_on_cluster, bucket_granules, s3_endpoint)
    check_gridded_mean_height_on_the_cluster_equals_h5py(
        cluster, indexed_on_cluster, bucket_granules, s3_endpoint, tmp_path)
    check_transient_failures_are_retried_on_the_worker(cluster, tmp_path)
    check_a_granule_that_kills_its_worker_is_isolated(cluster, tmp_path, bucket_granules,
                                                       s3_endpoint)
    check_a_granule_looping_in_hdf5_is_bounded(cluster, tmp_path)
    check_cli_index_on_a_running_scheduler(cluster, bucket_granules, s3_endpoint, capsys)
