"""The datacube benchmark's peers and oracle: kerchunk, VirtualiZarr + Icechunk, h5netcdf.

Each peer builds its cube from the HDF5 granules on the S3 endpoint the way its documentation
shows, with the same 16 threads h5sidecar's build uses for its reads, and writes it beside
h5sidecar's cubes on that endpoint:

- kerchunk: ``SingleHdf5ToZarr`` on every granule + ``MultiZarrToZarr`` along ``time``
  (``inline_threshold=0``: chunk bytes stay in the granules, as in the other cubes), one JSON
  object;
- VirtualiZarr 2.5: ``open_virtual_mfdataset`` with its ``HDFParser`` over an obstore
  ``S3Store`` registry (dimension coordinates loaded, its default), concatenated along ``time``
  and written with ``.vz.to_icechunk`` into an Icechunk repository whose virtual chunk
  container is the granules' prefix.

The oracle is ``xr.open_dataset(engine="h5netcdf")`` on the granules' local files.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

#: Threads each peer's build gets (h5sidecar's build reads 16 granules at a time too).
THREADS = 16
S3 = {"key": "bench", "secret": "bench", "region": "us-east-1"}


class Threads(ThreadPoolExecutor):
    """VirtualiZarr's ``parallel=`` takes an Executor class: this one with :data:`THREADS`."""

    def __init__(self) -> None:
        super().__init__(THREADS)


# -- kerchunk ---------------------------------------------------------------------------------------
def _fresh_s3fs() -> None:
    """Forget cached s3fs instances: one whose session was made on another event loop (zarr's,
    when a cube was read) fails every later request of a kerchunk step with "attached to a
    different loop"."""
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()


def kerchunk_from_hdf5(urls: Sequence[str]) -> dict[str, Any]:
    """``SingleHdf5ToZarr`` per granule (16 at a time) + ``MultiZarrToZarr`` along ``time``."""
    from kerchunk.hdf import SingleHdf5ToZarr

    def one(u: str) -> dict[str, Any]:
        with warnings.catch_warnings():  # it warns for each variable it leaves out
            warnings.simplefilter("ignore")
            return SingleHdf5ToZarr(u, storage_options={"anon": False}).translate()

    _fresh_s3fs()
    with ThreadPoolExecutor(THREADS) as pool:
        return combine_kerchunk(list(pool.map(one, urls)))


def combine_kerchunk(refs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """kerchunk's ``MultiZarrToZarr`` along ``time``, chunk bytes never inlined."""
    from kerchunk.combine import MultiZarrToZarr

    _fresh_s3fs()
    return MultiZarrToZarr(list(refs), concat_dims=["time"], inline_threshold=0,
                           remote_protocol="s3", remote_options={"anon": False}).translate()


def kerchunk_variables(refs: dict[str, Any]) -> list[str]:
    """The arrays a kerchunk reference set holds."""
    return sorted(k.rsplit("/", 1)[0] for k in refs["refs"] if k.endswith("/.zarray"))


def open_kerchunk(fo: str | dict[str, Any]) -> Any:
    """Plain xarray + zarr on kerchunk references (a JSON URL or dict), sources on S3."""
    import xarray as xr

    _fresh_s3fs()
    so = {"fo": fo, "remote_protocol": "s3", "asynchronous": True,
          "remote_options": {"anon": False, "asynchronous": True},
          "target_options": {"anon": False}}
    return xr.open_dataset("reference://", engine="zarr", chunks={},
                           backend_kwargs={"consolidated": False, "storage_options": so})


# -- VirtualiZarr + Icechunk ------------------------------------------------------------------------
def vz_registry(endpoint: str, bucket: str) -> Any:
    """VirtualiZarr's object store registry: one obstore ``S3Store`` for the bucket."""
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import S3Store

    store = S3Store(bucket, endpoint=endpoint, access_key_id=S3["key"],
                    secret_access_key=S3["secret"], region=S3["region"],
                    virtual_hosted_style_request=False, client_options={"allow_http": True})
    return ObjectStoreRegistry({f"s3://{bucket}": store})


def vz_open(urls: Sequence[str], endpoint: str, bucket: str) -> Any:
    """The virtual dataset of every granule, concatenated along ``time`` (in the given order;
    attributes of the first granule, VirtualiZarr's documented ``combine_attrs="override"``)."""
    from virtualizarr import open_virtual_mfdataset
    from virtualizarr.parsers import HDFParser

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr flags the numcodecs codecs as outside Zarr v3
        return open_virtual_mfdataset(
            list(urls), registry=vz_registry(endpoint, bucket), parser=HDFParser(),
            concat_dim="time", combine="nested", coords="minimal", compat="override",
            data_vars="minimal", combine_attrs="override", parallel=Threads)


def icechunk_storage(endpoint: str, bucket: str, prefix: str) -> Any:
    """An Icechunk repository's storage on the S3 endpoint."""
    import icechunk as ic

    return ic.s3_storage(bucket=bucket, prefix=prefix, region=S3["region"],
                         endpoint_url=endpoint, allow_http=True, force_path_style=True,
                         access_key_id=S3["key"], secret_access_key=S3["secret"])


def _containers(endpoint: str, source: str) -> tuple[Any, Any]:
    import icechunk as ic

    store = ic.s3_store(region=S3["region"], endpoint_url=endpoint, allow_http=True,
                        s3_compatible=True, force_path_style=True)
    creds = ic.containers_credentials(
        {source: ic.s3_credentials(access_key_id=S3["key"], secret_access_key=S3["secret"])})
    return ic.VirtualChunkContainer(source, store), creds


def vz_build(urls: Sequence[str], endpoint: str, bucket: str, prefix: str, source: str) -> Any:
    """Build VirtualiZarr's cube and commit it to a new Icechunk repository at ``prefix``."""
    import icechunk as ic

    vds = vz_open(urls, endpoint, bucket)
    container, creds = _containers(endpoint, source)
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(container)
    repo = ic.Repository.create(icechunk_storage(endpoint, bucket, prefix), config,
                                authorize_virtual_chunk_access=creds)
    session = repo.writable_session("main")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vds.vz.to_icechunk(session.store)
    return session.commit("VirtualiZarr cube")


def open_icechunk_peer(endpoint: str, bucket: str, prefix: str, source: str) -> Any:
    """xarray on the repository ``vz_build`` wrote (its container authorized again)."""
    import icechunk as ic
    import xarray as xr

    _, creds = _containers(endpoint, source)
    repo = ic.Repository.open(icechunk_storage(endpoint, bucket, prefix),
                              authorize_virtual_chunk_access=creds)
    return xr.open_zarr(repo.readonly_session("main").store, consolidated=False, chunks={})


# -- oracle -----------------------------------------------------------------------------------------
def truth(paths: Sequence[Path], variable: str = "tas") -> tuple[np.ndarray, np.ndarray]:
    """``variable`` of every granule (one time step each) stacked, as h5netcdf decodes it, and
    as it decodes it with float64 packing attributes (what a Zarr reader does: JSON carries no
    float32 ``scale_factor``; see :func:`h5sidecar.workflows.checks._cfcheck.open_truth`)."""
    from h5sidecar.workflows.checks._cfcheck import open_truth

    decoded, wide = [], []
    for p in paths:
        pair = open_truth(str(p), "")
        if pair is None:
            raise SystemExit(f"h5netcdf cannot open {p}")
        decoded.append(pair[0][variable].values)
        wide.append(pair[1][variable].values)
        for ds in {id(d): d for d in pair}.values():
            ds.close()
    return np.concatenate(decoded), np.concatenate(wide)


def compare(got: Any, expected: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """``equal`` (in h5netcdf's dtype, NaN where NaN), ``widened`` (equal to h5netcdf's decoding
    with float64 packing attributes) or ``differ``, with the largest absolute difference from
    h5netcdf's values."""
    got = np.asarray(got)
    want, wide = expected
    if got.shape != want.shape:
        return {"verdict": "differ", "max_abs_error": None, "note": f"shape {got.shape}"}
    g, w = got.astype("f8"), want.astype("f8")
    diff = np.where(np.isnan(g) & np.isnan(w), 0.0, np.abs(g - w))
    error = float(np.nan_to_num(diff, nan=np.inf).max()) if diff.size else 0.0
    if np.array_equal(got.astype(want.dtype), want, equal_nan=True):
        verdict = "equal"
    elif np.array_equal(got, wide.astype(got.dtype), equal_nan=True):
        verdict = "widened"
    else:
        verdict = "differ"
    return {"verdict": verdict, "max_abs_error": error}
