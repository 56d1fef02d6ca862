"""ICESat-2 science built on the library, outside its core: the gridded mean surface height of
ICESat-2-like photon data, computed on a Dask cluster.

One Dask task per granule: on a worker, the granule's sidecar is parsed once, and ``h_ph``,
``lat_ph`` and ``lon_ph`` of every beam group holding them are read by name with the batch
reader (the values :func:`h5sidecar.read_arrays` gives), in blocks of whole source chunks
(each source chunk fetched once, by byte range; every beam's blocks in one coalesced batch;
decoded into two buffers reused block after block), and binned into grid cells (sum and count
per touched cell).
Partial results are merged in a tree and only the merged cells come back to the client.

Why per granule rather than one Dask array per variable: building Dask arrays means opening
every group of every granule *on the client* (parsing each sidecar and decoding each group's
metadata there) before any work starts, which was measured to cost more than the reading
itself (``benchmarks/bench_workflows.py``) and grows with the number of granules.  A task per
granule keeps the client's work to listing the sidecars.

The same code runs on a laptop (``local:N``) or on a multi-machine cluster: tasks carry sidecar
URLs and storage options, and the workers read the sidecars and the source bytes directly.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidRequestError, SourceNotFoundError, require_extra
from h5sidecar.examples.grid_cells import _merge, _shape, bin_cells
from h5sidecar.references import GranuleRefs, read_refs

__all__ = ["beam_groups", "granule_cells", "gridded_mean_height", "plot_grid",
           "sidecars_of"]

#: Partial results merged per task of the reduction tree.
_FAN_IN = 8
#: Decoded bytes of one block read by a task (whole source chunks).
_BLOCK_BYTES = 64 * 2**20
_SIDECAR_SUFFIXES = (".parq", ".json")


def sidecars_of(refs: str | Path | Iterable[str | Path], *,
                storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """Sidecar URLs of ``refs``: one sidecar, a list of them, or a DEST folder / S3 prefix."""
    if isinstance(refs, str | Path):
        text = str(refs).rstrip("/")
        if text.endswith(_SIDECAR_SUFFIXES):
            return [text]
        from h5sidecar.catalog import list_indexed

        found = [g.sidecar for g in list_indexed(text, storage_options=storage_options, sizes=False)]
        if not found:
            raise SourceNotFoundError(f"no sidecar under {text}: index granules first "
                                      f"(h5sidecar index SOURCE -o {text})")
        return found
    return [str(r) for r in refs]


def beam_groups(refs: GranuleRefs,
                variables: Sequence[str] = ("h_ph", "lat_ph", "lon_ph")) -> list[str]:
    """Groups of a granule that hold all of ``variables`` (ATL03: ``gt1l/heights``, ...)."""
    groups = {p.rpartition("/")[0] for p in refs.arrays}
    return sorted(g for g in groups if all(f"{g}/{v}" in refs.arrays for v in variables))


def named_patterns(variables: Sequence[str]) -> list[str]:
    """``read_refs(arrays=...)`` patterns of the arrays named ``variables`` in any group."""
    return [p for v in variables for p in (v, f"*/{v}")]


def _block_rows(refs: GranuleRefs, paths: Sequence[str], block_bytes: int) -> int:
    """Rows per block: a whole number of the first variable's source chunks, ~block_bytes."""
    metas = [refs.arrays[p].meta for p in paths]
    chunk = metas[0].chunks[0] if metas[0].chunks else 1
    row_bytes = sum(m.numpy_dtype.itemsize for m in metas)
    return chunk * max(1, block_bytes // max(1, chunk * row_bytes))


def _blocks(refs: GranuleRefs, groups: Sequence[str], variables: Sequence[str],
            block_bytes: int) -> list[list[tuple[str, int, int]]]:
    """``(group, start, stop)`` row blocks of every group, packed into batches of about
    ``block_bytes`` decoded bytes (all variables): each batch is one read."""
    batches: list[list[tuple[str, int, int]]] = [[]]
    size = 0
    for group in groups:
        paths = [f"{group}/{v}" for v in variables]
        n = refs.arrays[paths[0]].meta.shape[0]
        step = _block_rows(refs, paths, block_bytes)
        row_bytes = sum(refs.arrays[p].meta.numpy_dtype.itemsize for p in paths)
        for start in range(0, n, step):
            stop = min(start + step, n)
            # a group at most once per batch (its arrays are keyed by path in a read)
            if batches[-1] and (size + (stop - start) * row_bytes > block_bytes
                                or batches[-1][-1][0] == group):
                batches.append([])
                size = 0
            batches[-1].append((group, start, stop))
            size += (stop - start) * row_bytes
    return [b for b in batches if b]


def granule_cells(sidecar: str, grid: float, variables: Sequence[str] = ("h_ph", "lat_ph",
                  "lon_ph"), storage_options: Mapping[str, Any] | None = None,
                  block_bytes: int = _BLOCK_BYTES) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                             int]:
    """Binned cells of every beam group of one granule: one task of the analysis.

    The sidecar is opened once, on the worker, for the named variables only
    (``read_refs(..., arrays=...)``: the other arrays' metadata and chunk references are never
    decoded).  The named arrays of every beam are read with the batch reader, in batches of at
    most ``block_bytes`` decoded bytes (each batch one coalesced fetch plan, so a small
    granule's arrays arrive in a few concurrent requests; the next batch is read while one is
    binned), CF-decoded as the xarray engine decodes them, and binned block by block.  No Zarr
    hierarchy or xarray Dataset is built: that was most of a small granule's cost.

    Returns
    -------
    cells, sums, counts : numpy.ndarray
        As :func:`bin_cells`, merged over the granule.
    groups : int
        Beam groups found.
    """
    from h5sidecar.read import SidecarStore

    opts = dict(storage_options) if storage_options else None
    # only the named variables' metadata is decoded: the other ~900 arrays of an ATL03 granule
    # cost more to decode than everything else of opening it
    refs = read_refs(sidecar, storage_options=opts, arrays=named_patterns(variables))
    groups = beam_groups(refs, variables)
    # one pass over each chunk: a chunk cache would only copy bytes never read again
    store = SidecarStore(refs, storage_options=opts, chunk_cache=None)
    batches = _blocks(refs, groups, variables, block_bytes)
    read = _block_reader(store, variables, batches)
    parts = []
    # the next block is fetched and inflated while this one is binned (two blocks in memory)
    with ThreadPoolExecutor(1, thread_name_prefix="h5sidecar-analysis") as ahead:
        pending = [ahead.submit(read, 0)] if batches else []
        for k, batch in enumerate(batches):
            got = pending.pop().result()
            if k + 1 < len(batches):
                pending.append(ahead.submit(read, k + 1))
            for g, _, _ in batch:
                h, lat, lon = (got[f"{g}/{v}"] for v in variables)
                parts.append(bin_cells(h, lat, lon, grid))
            del got
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, np.zeros(0), empty, 0
    return (*_merge(*parts), len(groups))


def _block_reader(store: Any, variables: Sequence[str],
                  batches: list[list[tuple[str, int, int]]]) -> Any:
    """``read(k)``: the CF-decoded arrays of batch ``k`` (as ``read_arrays(...,
    mask_and_scale=True)`` gives them).

    Blocks are decoded into two buffers, batch ``k`` into buffer ``k % 2`` (one being binned,
    one being read): decoding into fresh arrays for every block made the memory allocator map,
    page-fault and unmap hundreds of MB per granule in Dask workers, whose allocator returns
    freed memory to the system at once (``MALLOC_TRIM_THRESHOLD_``).  Arrays the batch reader
    does not decode itself, strings (they have no bytes to share a buffer), or arrays that are
    not 1-D are read with :func:`read_arrays`.
    """
    from h5sidecar.read import cf_decoded, out_dtype, read_arrays

    native, refs = store.native, store.refs
    paths = {f"{g}/{v}" for batch in batches for g, _, _ in batch for v in variables}
    if not all(native.supports(p) and len(refs.arrays[p].meta.shape) == 1
               and not native.codec(p).strings for p in paths):  # type: ignore[union-attr]
        def read_slow(k: int) -> dict[str, np.ndarray]:
            wanted = {f"{g}/{v}": slice(a, b) for g, a, b in batches[k] for v in variables}
            return read_arrays(store, wanted, mask_and_scale=True)  # type: ignore[no-any-return]
        return read_slow

    def layout(batch: list[tuple[str, int, int]]) -> list[tuple[str, int, int, np.dtype, int]]:
        """``(path, start, stop, dtype, offset)`` of each array of ``batch`` in a buffer."""
        out, offset = [], 0
        for g, a, b in batch:
            for v in variables:
                path = f"{g}/{v}"
                dtype = out_dtype(native.codec(path).dtype)
                out.append((path, a, b, dtype, offset))
                offset += -(-(b - a) * dtype.itemsize // 64) * 64  # 64-byte aligned
        return out

    layouts = [layout(batch) for batch in batches]
    size = max((x[4] + (x[2] - x[1]) * x[3].itemsize for lay in layouts for x in lay), default=0)
    buffers = [np.empty(size, np.uint8) for _ in range(min(2, len(batches)))]

    def read(k: int) -> dict[str, np.ndarray]:
        from h5sidecar._compat.fsspec import run_sync

        buf = buffers[k % 2]
        items = [(p, (slice(a, b),)) for p, a, b, _, _ in layouts[k]]
        outs = [buf[o : o + (b - a) * dt.itemsize].view(dt) for _, a, b, dt, o in layouts[k]]
        got = run_sync(native.read_into, items, outs)
        return {p: cf_decoded(refs, p, x) for (p, _), x in zip(items, got, strict=True)}

    return read


def _merge_granules(*parts: tuple[np.ndarray, np.ndarray, np.ndarray, int]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    merged = _merge(*[p[:3] for p in parts])
    return (*merged, sum(p[3] for p in parts))


def gridded_mean_height(
    refs: str | Path | Iterable[str | Path],
    *,
    grid: float = 1.0,
    storage_options: Mapping[str, Any] | None = None,
    variables: Sequence[str] = ("h_ph", "lat_ph", "lon_ph"),
    client: Any = None,
    block_bytes: int = _BLOCK_BYTES,
) -> Any:
    """Mean photon height on a regular lat/lon grid, computed on the Dask cluster.

    Parameters
    ----------
    refs : str, Path or iterable
        A DEST folder / S3 prefix of sidecars, one sidecar, or a list of sidecars.
    grid : float
        Cell size in degrees (> 0).
    storage_options : mapping, optional
        fsspec options for the sidecars and sources (e.g. an S3 endpoint); they travel to the
        workers with the tasks (secrets are better given to the workers' environment).
    variables : (height, latitude, longitude)
        Names of the variables in each beam group.
    client : distributed.Client, optional
        Cluster to compute on (default: Dask's current scheduler, i.e. the last Client
        created, else threads in this process).
    block_bytes : int
        Decoded bytes read per block (whole source chunks), which bounds workers' memory (a
        task holds two blocks: the one being binned and the next, read meanwhile).

    Returns
    -------
    xarray.Dataset
        ``mean_height`` (NaN where no photon) and ``count`` on ``lat``/``lon`` cell centres,
        covering the rows and columns that hold data.

    Raises
    ------
    InvalidRequestError
        ``grid`` not positive.
    SourceNotFoundError
        No sidecar, or no beam group holding ``variables``.
    """
    require_extra("dask", "dask", feature="gridded_mean_height")
    import dask

    if not grid > 0 or not np.isfinite(grid):
        raise InvalidRequestError(f"grid must be a positive number of degrees, got {grid!r}")
    sidecars = sidecars_of(refs, storage_options=storage_options)
    # one task per granule: the client parses no sidecar, each worker parses the ones it reads
    task = dask.delayed(granule_cells, pure=True)
    opts = dict(storage_options) if storage_options else None
    parts = [task(sc, grid, tuple(variables), opts, block_bytes) for sc in sidecars]
    merge = dask.delayed(_merge_granules, pure=True)
    while len(parts) > 1:
        parts = [merge(*parts[k : k + _FAN_IN]) for k in range(0, len(parts), _FAN_IN)]
    if client is not None:
        cells, sums, counts, n_groups = client.compute(parts[0]).result()
    else:
        (cells, sums, counts, n_groups), = dask.compute(parts[0])
    if n_groups == 0:
        raise SourceNotFoundError(f"no group with {', '.join(variables)} in {len(sidecars)} "
                                  "sidecar(s): is this photon-rate data (ATL03-like)?")
    return _to_dataset(cells, sums, counts, grid,
                       attrs={"granules": len(sidecars), "groups": n_groups})


def _to_dataset(cells: np.ndarray, sums: np.ndarray, counts: np.ndarray, grid: float,
                attrs: Mapping[str, Any]) -> Any:
    """The merged cells as a dense grid over the rows and columns that hold data."""
    import xarray as xr

    n_lon = _shape(grid)[1]
    i, j = cells // n_lon, cells % n_lon
    rows = np.arange(i.min(), i.max() + 1) if cells.size else np.arange(0)
    cols = np.arange(j.min(), j.max() + 1) if cells.size else np.arange(0)
    count = np.zeros((rows.size, cols.size), dtype=np.int64)
    total_h = np.zeros((rows.size, cols.size))
    if cells.size:
        count[i - rows[0], j - cols[0]] = counts
        total_h[i - rows[0], j - cols[0]] = sums
    mean = np.full(count.shape, np.nan)
    np.divide(total_h, count, out=mean, where=count > 0)
    return xr.Dataset(
        {"mean_height": (("lat", "lon"), mean, {"long_name": "mean photon height",
                                                 "units": "m"}),
         "count": (("lat", "lon"), count, {"long_name": "photons per cell"})},
        coords={"lat": ("lat", -90.0 + (rows + 0.5) * grid, {"units": "degrees_north"}),
                "lon": ("lon", -180.0 + (cols + 0.5) * grid, {"units": "degrees_east"})},
        attrs={"grid_degrees": grid, **attrs, "photons": int(counts.sum())},
    )


def plot_grid(ds: Any, path: str | Path | None = None, *, title: str | None = None,
              variable: str = "mean_height") -> bytes:
    """A PNG map of a grid from :func:`gridded_mean_height` (written to ``path`` if given).

    Returns
    -------
    bytes
        The PNG image.
    """
    require_extra("gateway", "matplotlib", feature="plot_grid")
    # the object-oriented API draws without pyplot's global state or a GUI backend
    from matplotlib.figure import Figure

    da = ds[variable]
    fig = Figure(figsize=(8, 4.5), dpi=100)
    ax = fig.add_subplot()
    # cells as markers: a few tracks on a large grid stay visible (an image would be all blank)
    lon2, lat2 = np.meshgrid(ds["lon"].values, ds["lat"].values)
    values = np.asarray(da.values, dtype="f8")
    ok = np.isfinite(values)
    points = ax.scatter(lon2[ok], lat2[ok], c=values[ok], s=12, marker="s", cmap="viridis",
                        linewidths=0)
    fig.colorbar(points, ax=ax, label=f"{da.attrs.get('long_name', variable)} "
                                      f"({da.attrs.get('units', '')})")
    if ok.any():
        ax.margins(0.05)
    else:
        ax.set_xlim(-180, 180)
        ax.set_ylim(-90, 90)
    ax.set_xlabel("longitude (degrees east)")
    ax.set_ylabel("latitude (degrees north)")
    ax.grid(True, linewidth=0.3)
    ax.set_title(title or f"{da.attrs.get('long_name', variable)}, "
                          f"{ds.attrs.get('grid_degrees', '')} degree cells, "
                          f"{ds.attrs.get('photons', 0):,} photons")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    png = buf.getvalue()
    if path is not None:
        Path(path).write_bytes(png)
    return png
