"""An analysis on the cluster: gridded mean surface height of ICESat-2-like photon data.

Every beam group holding ``heights/h_ph``, ``heights/lat_ph`` and ``heights/lon_ph`` of every
granule is opened through its sidecar with the ``h5sidecar`` engine, with Dask chunks that are
whole source chunks (each source chunk is read by exactly one task).  Each chunk is binned into
grid cells on the worker that read it (sum and count per touched cell, a few kB), partial
results are merged in a tree, and only the merged cells come back to the client.

The same code runs on a laptop (``local:N``) or on a multi-machine cluster: the tasks carry the
sidecar's references and storage options, the workers read the source bytes directly.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidRequestError, SourceNotFoundError
from h5sidecar.references import GranuleRefs, read_refs

__all__ = ["beam_groups", "bin_cells", "gridded_mean_height", "plot_grid", "sidecars_of"]

#: Partial results merged per task of the reduction tree.
_FAN_IN = 8
_SIDECAR_SUFFIXES = (".parq", ".json")


def sidecars_of(refs: str | Path | Iterable[str | Path], *,
                storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """Sidecar URLs of ``refs``: one sidecar, a list of them, or a DEST folder / S3 prefix."""
    if isinstance(refs, str | Path):
        text = str(refs).rstrip("/")
        if text.endswith(_SIDECAR_SUFFIXES):
            return [text]
        from h5sidecar.catalog import list_indexed

        found = [g.sidecar for g in list_indexed(text, storage_options=storage_options)]
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


def bin_cells(h: np.ndarray, lat: np.ndarray, lon: np.ndarray, grid: float
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum and count of finite ``h`` per cell of a ``grid``-degree lat/lon grid.

    Cell ``(i, j)`` (flattened ``i * n_lon + j``) covers latitudes ``-90 + i*grid`` to
    ``-90 + (i+1)*grid`` and longitudes ``-180 + j*grid`` onward; 90 N falls in the last row
    and 180 E in the first column (it is 180 W).

    Returns
    -------
    cells : int64 array
        Sorted flat indices of the touched cells.
    sums : float64 array
    counts : int64 array
    """
    h = np.asarray(h, dtype="f8").ravel()
    lat = np.asarray(lat, dtype="f8").ravel()
    lon = np.asarray(lon, dtype="f8").ravel()
    ok = np.isfinite(h) & np.isfinite(lat) & np.isfinite(lon) & (np.abs(lat) <= 90)
    n_lat, n_lon = _shape(grid)
    i = np.clip(np.floor((lat[ok] + 90.0) / grid), 0, n_lat - 1).astype(np.int64)
    j = np.clip(np.floor(((lon[ok] + 180.0) % 360.0) / grid), 0, n_lon - 1).astype(np.int64)
    cells, inverse = np.unique(i * n_lon + j, return_inverse=True)
    sums = np.bincount(inverse, weights=h[ok], minlength=cells.size)
    counts = np.bincount(inverse, minlength=cells.size).astype(np.int64)
    return cells, sums, counts


def _shape(grid: float) -> tuple[int, int]:
    return int(np.ceil(180.0 / grid - 1e-9)), int(np.ceil(360.0 / grid - 1e-9))


def _merge(*parts: tuple[np.ndarray, np.ndarray, np.ndarray]
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cells = np.concatenate([p[0] for p in parts])
    if cells.size == 0:
        return parts[0]
    u, inverse = np.unique(cells, return_inverse=True)
    sums = np.bincount(inverse, weights=np.concatenate([p[1] for p in parts]), minlength=u.size)
    counts = np.bincount(inverse, weights=np.concatenate([p[2] for p in parts]),
                         minlength=u.size).astype(np.int64)
    return u, sums, counts


def _tree(parts: list[Any]) -> Any:
    import dask

    merge = dask.delayed(_merge, pure=True)
    while len(parts) > 1:
        parts = [merge(*parts[k : k + _FAN_IN]) for k in range(0, len(parts), _FAN_IN)]
    return parts[0]


def _partials(sidecar: str, refs: GranuleRefs, group: str, grid: float,
              variables: Sequence[str], open_kwargs: Mapping[str, Any]) -> list[Any]:
    import dask

    import h5sidecar

    # only the three variables are decoded into the Dataset (a beam's heights group has a dozen)
    others = [p.rpartition("/")[2] for p in refs.arrays
              if p.rpartition("/")[0] == group and p.rpartition("/")[2] not in variables]
    # by path, not GranuleRefs: xarray tokenizes what it opens, and tokenizing a path is cheap;
    # a store opened from a path also pickles small (workers parse the sidecar once each)
    ds = h5sidecar.open_dataset(sidecar, group=group, chunks={}, drop_variables=others,
                                decode_times=False, **open_kwargs)
    arrays = [ds[v].data for v in variables]
    if not all(hasattr(a, "to_delayed") for a in arrays):
        raise InvalidRequestError("gridded_mean_height needs Dask (pip install 'h5sidecar[dask]')")
    # the three variables share the photon dimension and its source chunking, so their Dask
    # blocks line up one to one
    blocks = [a.to_delayed().ravel() for a in arrays]
    if len({len(b) for b in blocks}) != 1:
        raise InvalidRequestError(f"{sidecar} {group}: {', '.join(variables)} are not "
                                  "chunked alike, so they cannot be binned block by block")
    binned = dask.delayed(bin_cells, pure=True)
    return [binned(h, la, lo, grid) for h, la, lo in zip(*blocks, strict=True)]


def gridded_mean_height(
    refs: str | Path | Iterable[str | Path],
    *,
    grid: float = 1.0,
    storage_options: Mapping[str, Any] | None = None,
    variables: Sequence[str] = ("h_ph", "lat_ph", "lon_ph"),
    client: Any = None,
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
        workers with the tasks.
    variables : (height, latitude, longitude)
        Names of the variables in each beam group.
    client : distributed.Client, optional
        Cluster to compute on (default: Dask's current scheduler, i.e. the last Client
        created, else threads in this process).

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
    import dask

    if not grid > 0 or not np.isfinite(grid):
        raise InvalidRequestError(f"grid must be a positive number of degrees, got {grid!r}")
    open_kwargs = {"storage_options": dict(storage_options)} if storage_options else {}
    sidecars = sidecars_of(refs, storage_options=storage_options)
    parts: list[Any] = []
    n_groups = 0
    for sc in sidecars:
        granule = read_refs(sc, storage_options=dict(storage_options) if storage_options else None)
        for group in beam_groups(granule, variables):
            parts.extend(_partials(sc, granule, group, grid, variables, open_kwargs))
            n_groups += 1
    if not parts:
        raise SourceNotFoundError(f"no group with {', '.join(variables)} in {len(sidecars)} "
                                  "sidecar(s): is this photon-rate data (ATL03-like)?")
    total = _tree(parts)
    if client is not None:
        cells, sums, counts = client.compute(total).result()
    else:
        (cells, sums, counts), = dask.compute(total)
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
