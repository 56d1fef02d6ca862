"""Points binned into the cells of a regular latitude/longitude grid: sums and counts per cell.

The numerical core of :mod:`.icesat2`'s gridded mean height, free of any reading: what a task
does with the values of one block, and how partial results merge.
"""

from __future__ import annotations

import numpy as np

__all__ = ["bin_cells"]

#: Photons binned per step of :func:`bin_cells` (its temporaries, ~1 MiB, stay in the cache).
_PIECE = 2**16


def bin_cells(h: np.ndarray, lat: np.ndarray, lon: np.ndarray, grid: float
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum and count of finite ``h`` per cell of a ``grid``-degree lat/lon grid.

    Cell ``(i, j)`` (flattened ``i * n_lon + j``) covers latitudes ``-90 + i*grid`` to
    ``-90 + (i+1)*grid`` and longitudes ``-180 + j*grid`` onward; 90 N falls in the last row
    and 180 E in the first column (it is 180 W).  Photons with a non-finite value or a
    latitude beyond 90 degrees are not binned.

    Returns
    -------
    cells : int64 array
        Sorted flat indices of the touched cells.
    sums : float64 array
    counts : int64 array
    """
    h = np.asarray(h).ravel()
    if h.dtype.kind != "f" or h.dtype.itemsize > 8:
        h = h.astype("f8")  # float32 heights are summed in float64 without a converted copy
    lat = np.asarray(lat, dtype="f8").ravel()
    lon = np.asarray(lon, dtype="f8").ravel()
    n_lat, n_lon = _shape(grid)
    # Pieces of _PIECE photons through preallocated buffers: every temporary stays in the CPU
    # cache and no step allocates (and page-faults) a granule-sized array; with a dozen
    # whole-array temporaries this was ~4x slower.  Photons come in track order, so
    # neighbours mostly share a cell: each run of equal cells is summed (linear) and only one
    # entry per run is sorted (a sort of every photon was most of the CPU before).
    step = min(h.size, _PIECE)
    x, y, new = np.empty(step), np.empty(step), np.empty(step, dtype=bool)
    exact = n_lat * n_lon < 2**53  # flat cell numbers are exact in float64
    run_cells, run_sums, run_counts = [], [], []
    for a in range(0, h.size, step):
        hp, la, lo = h[a : a + step], lat[a : a + step], lon[a : a + step]
        if not _all_binned(hp, la, lo):
            ok = np.isfinite(hp) & np.isfinite(lo) & (np.abs(la) <= 90)  # NaN latitudes fail
            hp, la, lo = hp[ok], la[ok], lo[ok]
        m = hp.size
        if m == 0:
            continue
        i, j, d = x[:m], y[:m], new[:m]
        # floor((lat + 90) / grid), at most the last row: lat >= -90, so never below 0
        np.add(la, 90.0, out=i)
        np.divide(i, grid, out=i)
        np.floor(i, out=i)
        np.minimum(i, n_lat - 1, out=i)
        # floor(((lon + 180) % 360) / grid): the remainder only where it changes the value
        np.add(lo, 180.0, out=j)
        if j.min() < 0.0 or j.max() >= 360.0:
            wrap = (j < 0.0) | (j >= 360.0)
            j[wrap] = np.remainder(j[wrap], 360.0)
        np.divide(j, grid, out=j)
        np.floor(j, out=j)
        np.minimum(j, n_lon - 1, out=j)
        if exact:
            np.multiply(i, n_lon, out=i)
            flat = np.add(i, j, out=i)
        else:
            flat = i.astype(np.int64) * n_lon + j.astype(np.int64)
        d[0] = True
        np.not_equal(flat[1:], flat[:-1], out=d[1:])
        starts = np.flatnonzero(d)
        run_cells.append(flat[starts].astype(np.int64))
        run_sums.append(np.add.reduceat(hp, starts, dtype=np.float64))
        run_counts.append(np.diff(starts, append=m))
    if not run_cells:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
    cells, inverse = np.unique(np.concatenate(run_cells), return_inverse=True)
    sums = np.bincount(inverse, weights=np.concatenate(run_sums), minlength=cells.size)
    counts = np.bincount(inverse, weights=np.concatenate(run_counts),
                         minlength=cells.size).astype(np.int64)
    return cells, sums, counts


def _all_binned(h: np.ndarray, lat: np.ndarray, lon: np.ndarray) -> bool:
    """True when every photon of a piece is binned (finite, ``|lat| <= 90``), found by
    reductions that make no temporary array (and bring the piece into the cache for the steps
    that follow): a NaN makes a minimum or maximum NaN, which fails every test."""
    return bool(np.isfinite(h.min()) and np.isfinite(h.max()) and lat.min() >= -90.0
                and lat.max() <= 90.0 and np.isfinite(lon.min()) and np.isfinite(lon.max()))


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
