"""A real distributed cluster (2 worker processes) reduces a granule read from S3 via its sidecar."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from h5sidecar.read.zarr.filesystem import H5SidecarFileSystem
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import write_refs
from tests._granules import read_h5, refs_for

distributed = pytest.importorskip("distributed")

SECRET = "dask-worker-s3cr3t-4f1c"


@pytest.fixture
def s3_sidecar(
    small_h5: Path, s3: Any, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    url = f"s3://{s3_bucket}/granules/small.h5"
    s3.put(str(small_h5), url)
    refs = refs_for(url, storage_options=s3_storage_options)
    sidecar = write_refs(refs, f"{url}.parq", storage_options=s3_storage_options)
    # a secret the workers never see: they resolve credentials from their own environment
    return sidecar, {**s3_storage_options, "secret": SECRET}


def test_distributed_reduction_equals_h5py(
    s3_sidecar: tuple[str, dict[str, Any]], small_h5: Path
) -> None:
    sidecar, options = s3_sidecar
    store = SidecarStore(sidecar, storage_options=options)
    blob = pickle.dumps(store)
    assert SECRET.encode() not in blob
    assert SECRET.encode() not in pickle.dumps(H5SidecarFileSystem(sidecar, target_options=options))
    ds = xr.open_dataset(
        store, engine="h5sidecar", group="gt1l/heights", chunks={}, chunk_bytes=8_000
    )
    assert ds["h_ph"].data.npartitions == 3  # 5 source chunks of 4 kB -> 2 + 2 + 1
    h_ph = read_h5(small_h5, "gt1l/heights/h_ph")
    quality = read_h5(small_h5, "gt1l/heights/quality_ph")
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        mean, biggest, total = client.compute(
            [ds["h_ph"].mean(), ds["quality_ph"].max(), ds["h_ph"].astype("f8").sum()],
            sync=True,
        )
        workers_used = client.run(lambda: True)
    assert len(workers_used) == 2
    assert float(mean) == pytest.approx(float(h_ph.mean()), rel=1e-6)
    assert int(biggest) == int(quality.max())
    np.testing.assert_allclose(float(total), h_ph.astype("f8").sum(), rtol=1e-12)
