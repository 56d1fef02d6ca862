"""A small collection of daily gridded CF netCDF-4 granules: the datacube sample.

One file per day (``tas_YYYYMMDD.nc``), each with one step of an unlimited ``time`` dimension
(``days since 2020-01-01``, standard calendar), ``lat``/``lon`` coordinates, ``tas`` packed as
int16 (``scale_factor``/``add_offset``/``_FillValue``, zlib + shuffle, a few fill cells per day)
and ``pr`` float32 with a ``_FillValue``.  With ``mixed_packing=True`` one more granule is written
(``tas_YYYYMMDD_repacked.nc``, the day after the last) whose ``tas`` uses a different
``scale_factor``/``add_offset``: tools that keep the first file's encoding mis-decode it, which
is what ``h5sidecar cube`` refuses (or splits off).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from h5sidecar.errors import require_extra

__all__ = ["PACKING", "REPACKED", "TIME_UNITS", "write_daily_collection", "write_daily_granule"]

TIME_UNITS = "days since 2020-01-01 00:00:00"
EPOCH = date(2020, 1, 1)
#: (scale_factor, add_offset) of ``tas`` in the regular granules and in the odd one.
PACKING = (0.01, 273.15)
REPACKED = (0.02, 250.0)
FILL_I2 = np.int16(-32767)
FILL_F4 = np.float32(-9999.0)


def write_daily_granule(path: str | Path, day: date, *, nlat: int = 8, nlon: int = 12,
                        packing: tuple[float, float] = PACKING, seed: int = 0,
                        time_units: str = TIME_UNITS, time_dtype: str = "f8",
                        hour: float = 12.0) -> Path:
    """Write one daily granule (see module docstring) for ``day``.

    Parameters
    ----------
    path : str or Path
        File to write (overwritten).
    day : datetime.date
        The day; ``time`` holds its noon as ``days since 2020-01-01``.
    nlat, nlon : int
        Grid size.
    packing : (float, float)
        ``scale_factor`` and ``add_offset`` of ``tas``.
    seed : int
        Seeds the values (mixed with the day, so each day differs).
    time_units, time_dtype, hour
        ``time`` holds ``hour`` o'clock of ``day`` in these CF units (``"<days|hours|minutes|
        seconds> since <ISO date>"``) and dtype; the defaults give the collection's granules.

    Returns
    -------
    Path
    """
    require_extra("netcdf", "netCDF4", feature="writing netCDF-4 samples")
    import netCDF4  # optional (h5sidecar[netcdf]): imported here to keep import cheap

    path = Path(path)
    offset = (day - EPOCH).days
    rng = np.random.default_rng([seed, offset + 10_000])
    lat = np.linspace(-60.0, 60.0, nlat, dtype="f4")
    lon = np.linspace(0.0, 330.0, nlon, dtype="f4")
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.setncatts({"Conventions": "CF-1.8", "title": "h5sidecar sample daily grid",
                      "date": day.isoformat()})
        nc.createDimension("time", None)
        nc.createDimension("lat", nlat)
        nc.createDimension("lon", nlon)
        t = nc.createVariable("time", time_dtype, ("time",), chunksizes=(1,))
        t.setncatts({"units": time_units, "calendar": "standard", "standard_name": "time",
                     "axis": "T"})
        t[:] = [_time_value(day, hour, time_units)]
        for name, values, units in (("lat", lat, "degrees_north"), ("lon", lon, "degrees_east")):
            v = nc.createVariable(name, "f4", (name,))
            v.units = units
            v[:] = values
        _write_tas(nc, rng, lat, lon, offset, packing)
        pr = nc.createVariable("pr", "f4", ("time", "lat", "lon"), zlib=True,
                               chunksizes=(1, nlat, nlon), fill_value=FILL_F4)
        pr.setncatts({"units": "mm day-1", "standard_name": "precipitation_amount"})
        rain = rng.gamma(0.6, 4.0, size=(1, nlat, nlon)).astype("f4")
        rain[rng.random(rain.shape) < 0.1] = FILL_F4  # missing cells
        pr.set_auto_mask(False)
        pr[:] = rain
    return path


def _time_value(day: date, hour: float, units: str) -> float:
    """``hour`` o'clock of ``day`` in CF ``units`` (standard calendar)."""
    unit, _, ref = units.partition(" since ")
    start = datetime.fromisoformat(ref.strip())
    return (datetime.combine(day, datetime.min.time()) + timedelta(hours=hour) - start) / (
        timedelta(**{unit.strip(): 1}))


def _write_tas(nc: Any, rng: np.random.Generator, lat: np.ndarray, lon: np.ndarray,
               offset: int, packing: tuple[float, float]) -> None:
    scale, add = packing
    tas = nc.createVariable("tas", "i2", ("time", "lat", "lon"), zlib=True, shuffle=True,
                            chunksizes=(1, len(lat), len(lon)), fill_value=FILL_I2)
    tas.setncatts({"units": "K", "standard_name": "air_temperature",
                   "scale_factor": np.float32(scale), "add_offset": np.float32(add)})
    kelvin = (288.0 - 30.0 * np.abs(np.sin(np.radians(lat)))[:, None]
              + 3.0 * np.cos(np.radians(lon))[None, :] + 0.1 * offset
              + rng.normal(0.0, 0.5, size=(len(lat), len(lon))))
    packed = np.round((kelvin - np.float32(add)) / np.float32(scale)).astype("i2")
    packed[rng.random(packed.shape) < 0.05] = FILL_I2  # a few fill cells
    tas.set_auto_maskandscale(False)
    tas[:] = packed[None]


def write_daily_collection(outdir: str | Path, *, days: int = 6, start: date = EPOCH,
                           nlat: int = 8, nlon: int = 12, mixed_packing: bool = False,
                           seed: int = 0) -> list[Path]:
    """Write ``days`` daily granules (``tas_YYYYMMDD.nc``) into ``outdir``.

    Parameters
    ----------
    outdir : str or Path
        Directory (created if missing).
    days : int
        Number of consecutive days, from ``start``.
    start : datetime.date
        First day.
    nlat, nlon : int
        Grid size.
    mixed_packing : bool
        Also write ``tas_YYYYMMDD_repacked.nc`` for the day after the last, with ``tas`` packed
        with :data:`REPACKED` instead of :data:`PACKING` (see module docstring).
    seed : int
        Seeds the values.

    Returns
    -------
    list of Path
        The written files in day order (the repacked one last).
    """
    if days < 1:
        raise ValueError(f"days={days}: ask for at least one day")
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(days):
        day = start + timedelta(days=i)
        paths.append(write_daily_granule(out / f"tas_{day:%Y%m%d}.nc", day, nlat=nlat,
                                         nlon=nlon, seed=seed))
    if mixed_packing:
        day = start + timedelta(days=days)
        paths.append(write_daily_granule(out / f"tas_{day:%Y%m%d}_repacked.nc", day, nlat=nlat,
                                         nlon=nlon, packing=REPACKED, seed=seed))
    return paths
