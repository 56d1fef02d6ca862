"""Realistic sample granules: ICESat-2 ATL03-like HDF5 files and a CF netCDF-4 file.

The files imitate the *structure* of real archival products (group tree, 935 variables,
10,000-row gzip chunks with unlimited first dimensions, dimension scales, compact and contiguous
ancillary datasets, fixed-length strings, attribute-only metadata groups) and their *values*
(monotonic time, an orbit ground track, noisy photon heights around a surface), so that chunk
counts, metadata layout and compression ratios resemble what an indexer meets in an archive.
Everything is deterministic for a given ``seed``.

Examples
--------
>>> from h5sidecar.sample import write_sample_granules
>>> paths = write_sample_granules("data", granules=2)  # doctest: +SKIP
>>> paths[0].name  # doctest: +SKIP
'ATL03_20190329132345_00010301_006_01.h5'
"""

from __future__ import annotations

from pathlib import Path

from h5sidecar.sample._atl03 import granule_name, write_atl03_like
from h5sidecar.sample._collection import write_daily_collection, write_daily_granule
from h5sidecar.sample._corrupt import flip_bits
from h5sidecar.sample._netcdf import write_netcdf_like

__all__ = ["flip_bits", "granule_name", "write_atl03_like", "write_daily_collection",
           "write_daily_granule", "write_netcdf_like", "write_sample_granules"]


def write_sample_granules(outdir: str | Path, *, granules: int = 2, photons: int = 200_000,
                          seed: int = 0) -> list[Path]:
    """Write ``granules`` ATL03-like granules with real-style names into ``outdir``.

    Granule ``i`` is ``write_atl03_like(outdir / granule_name(seed + i), seed=seed + i)``, so each
    has its own track, cycle, region, start time and values.

    Parameters
    ----------
    outdir : str or Path
        Directory to write into (created if missing).
    granules : int
        Number of granules.
    photons : int
        Photons per granule, over its six beams (see :func:`write_atl03_like`).
    seed : int
        Seed of the first granule.

    Returns
    -------
    list of Path
        The written files, in order.
    """
    if granules < 1:
        raise ValueError(f"granules={granules}: ask for at least one granule")
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    return [write_atl03_like(out / granule_name(seed + i), photons=photons, seed=seed + i)
            for i in range(granules)]
