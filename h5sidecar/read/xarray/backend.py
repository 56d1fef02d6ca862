"""The xarray engine ``"h5sidecar"``: open a granule's sidecar as an xarray Dataset / DataTree.

The engine is the entry point xarray finds (``engine="h5sidecar"``); the work is done below it:
one group through :mod:`h5sidecar.read.xarray._zarr_data_store` (xarray's Zarr machinery with the CF
corrections that make decoding identical to ``engine="h5netcdf"``: storage fill values are not
masks, CF attributes get their numeric types back, Dask chunks are aligned to source chunks),
every group through :mod:`h5sidecar.read.xarray._datatree` (dimension clashes between a group and its
ancestors resolved, see :func:`h5sidecar.open_datatree`).

Data is read by the native batch reader, not by zarr, except for arrays of Python objects;
``native=False`` keeps zarr's reader for every array.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping
from typing import Any

from xarray.backends import BackendEntrypoint

from h5sidecar._compat.xarray import requested_chunks
from h5sidecar._docs import docs_page
from h5sidecar.read.xarray._attributes import require_dask
from h5sidecar.read.xarray._datatree import build_datatree, open_groups
from h5sidecar.read.xarray._zarr_data_store import (
    DEFAULT_CHUNK_BYTES,
    aligned_chunks,
    cf_attributes,
    open_group_dataset,
)
from h5sidecar.read.zarr.store import SidecarStore
from h5sidecar.references import GranuleRefs
from h5sidecar.settings import ReadSettings

__all__ = ["DEFAULT_CHUNK_BYTES", "H5SidecarBackend", "aligned_chunks", "cf_attributes"]


def _looks_like_sidecar(path: str) -> bool:
    """Cheap, local-only sniffing: our Parquet directory or our JSON (extras key present)."""
    from h5sidecar.references import EXTRAS_KEY

    marker = f'"{EXTRAS_KEY}"'.encode()
    if os.path.isdir(path):
        zmeta = os.path.join(path, ".zmetadata")
        if not (path.rstrip("/").endswith(".parq") and os.path.isfile(zmeta)):
            return False
        with open(zmeta, "rb") as f:
            return marker in f.read()
    if not (os.path.isfile(path) and path.endswith(".json")):
        return False
    import mmap

    with open(path, "rb") as f:
        if f.read(1) != b"{":
            return False
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            # the extras block is written after the refs: search from the end
            return m.rfind(b"," + marker + b":") >= 0


def _dask_for_xarrays_chunks() -> None:
    """xarray chunks what an engine returns after it returns, and without Dask its error
    ("unrecognized chunk manager dask") names nothing to install: name the extra first (only
    when Dask is missing: reading xarray's frame is needless otherwise)."""
    if importlib.util.find_spec("dask") is None:
        require_dask(requested_chunks())


class H5SidecarBackend(BackendEntrypoint):
    """xarray backend for h5sidecar sidecars (``engine="h5sidecar"``)."""

    description = "Open HDF5/netCDF4 granules through h5sidecar sidecars (kerchunk JSON/Parquet)"
    # shown by xr.backends.list_engines() and in xarray's errors: an absolute URL a user can open
    url = docs_page("how-to/xarray/")
    open_dataset_parameters = (
        "filename_or_obj",
        "drop_variables",
        "group",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "use_cftime",
        "decode_timedelta",
        "storage_options",
        "remote_options",
        "settings",
        "chunk_bytes",
        "native",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """True for local sidecars written by h5sidecar (and for GranuleRefs / SidecarStore)."""
        if isinstance(filename_or_obj, GranuleRefs | SidecarStore):
            return True
        if not isinstance(filename_or_obj, str | os.PathLike):
            return False
        try:
            return _looks_like_sidecar(os.fspath(filename_or_obj))
        except OSError:
            return False

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        mask_and_scale: bool = True,
        decode_times: bool = True,
        concat_characters: bool = True,
        decode_coords: bool = True,
        use_cftime: bool | None = None,
        decode_timedelta: bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_options: Mapping[str, Any] | None = None,
        settings: ReadSettings | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        native: bool = True,
    ) -> Any:
        """Open one group of a sidecar as a Dataset (lazily; no source bytes are read).

        Parameters
        ----------
        filename_or_obj : str, path-like, dict, GranuleRefs or SidecarStore
            The sidecar (local path or URL such as ``s3://bucket/x.h5.parq``), or a JSON
            sidecar's parsed content.
        group : str, optional
            Group path (``"gt1l/heights"``); the root group by default.
        storage_options : mapping, optional
            fsspec options to read the sidecar (and, by default, the source).
        remote_options : mapping, optional
            Options to read the source objects when they differ.
        settings : ReadSettings, optional
            Fetch settings (coalescing, concurrency, retries, allow-list).
        chunk_bytes : int
            Target size of the Dask chunks ``chunks={}`` creates (whole multiples of the
            source chunks); 0 keeps the source chunks.
        native : bool
            Read data with h5sidecar's batch reader (default; coalesced fetches, chunks decoded
            in parallel threads) rather than zarr's per-chunk reader.
        mask_and_scale, decode_times, concat_characters, decode_coords, use_cftime, decode_timedelta
            xarray's CF decoding options.
        """
        _dask_for_xarrays_chunks()
        return open_group_dataset(
            filename_or_obj,
            drop_variables=drop_variables,
            group=group,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            storage_options=storage_options,
            remote_options=remote_options,
            settings=settings,
            chunk_bytes=chunk_bytes,
            native=native,
        )

    def open_groups_as_dict(  # type: ignore[override]
        self, filename_or_obj: Any, *, group: str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Every group (below ``group``) as a Dataset, keyed ``"/"``, ``"/gt1l"``, ..."""
        _dask_for_xarrays_chunks()
        return open_groups(filename_or_obj, group=group, **kwargs)

    def open_datatree(  # type: ignore[override]
        self, filename_or_obj: Any, *, group: str | None = None, **kwargs: Any
    ) -> Any:
        """Every group as one DataTree (dimension-name clashes resolved, see open_datatree)."""
        _dask_for_xarrays_chunks()
        return build_datatree(filename_or_obj, group=group, **kwargs)
