"""A small CF-1.8 netCDF-4 file with the features real gridded products use.

Written with the netCDF-C library (``netCDF4``), so it carries what netCDF-C writes and h5py does
not: ``_NCProperties``, ``_Netcdf4Dimid``, dimension scales for every dimension and hidden
dimension-only datasets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from h5sidecar.errors import require_extra

TIME_STEPS, TIME_CHUNK = 25, 10  # unlimited time with a partial edge chunk (25 = 2*10 + 5)
NLAT, NLON = 90, 180


def write_netcdf_like(path: str | Path, *, seed: int = 0) -> Path:
    """Write a CF netCDF-4 file: packed integers, fill values, unlimited time, char strings.

    Variables: ``time`` (unlimited, days since 2000-01-01, standard calendar) with
    ``time_bnds``; ``lat``/``lon`` coordinates; ``tas`` packed as int16 with
    ``scale_factor``/``add_offset``/``_FillValue`` (zlib + shuffle, chunks of 10 time steps, so
    the last chunk is partial); ``pr`` float32 with ``_FillValue`` and missing values; ``orog``
    contiguous 2-D; ``crs`` scalar grid mapping; ``site_name`` fixed-width char array.

    Parameters
    ----------
    path : str or Path
        File to write (overwritten).
    seed : int
        Seeds the values; the same seed writes the same values.

    Returns
    -------
    Path
        ``path``.
    """
    require_extra("netcdf", "netCDF4", feature="writing netCDF-4 samples")
    import netCDF4  # optional (h5sidecar[netcdf]): imported here to keep import cheap

    path = Path(path)
    rng = np.random.default_rng(seed)
    lat = np.linspace(-89.0, 89.0, NLAT, dtype="f4")
    lon = np.linspace(0.0, 358.0, NLON, dtype="f4")
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.setncatts({"Conventions": "CF-1.8", "title": "h5sidecar sample gridded product",
                      "institution": "h5sidecar sample generator",
                      "history": f"written by h5sidecar.sample.write_netcdf_like(seed={seed})"})
        nc.createDimension("time", None)
        nc.createDimension("lat", NLAT)
        nc.createDimension("lon", NLON)
        nc.createDimension("bnds", 2)
        nc.createDimension("site", 4)
        nc.createDimension("name_strlen", 12)
        t = nc.createVariable("time", "f8", ("time",), chunksizes=(TIME_CHUNK,))
        t.setncatts({"units": "days since 2000-01-01 00:00:00", "calendar": "standard",
                     "standard_name": "time", "axis": "T", "bounds": "time_bnds"})
        t[:] = 7305.5 + np.arange(TIME_STEPS)
        tb = nc.createVariable("time_bnds", "f8", ("time", "bnds"), chunksizes=(TIME_CHUNK, 2))
        tb[:] = np.stack([t[:] - 0.5, t[:] + 0.5], axis=1)
        for name, values, units, axis in (("lat", lat, "degrees_north", "Y"),
                                          ("lon", lon, "degrees_east", "X")):
            v = nc.createVariable(name, "f4", (name,))
            v.setncatts({"units": units, "standard_name": {"Y": "latitude", "X": "longitude"}[axis],
                         "axis": axis})
            v[:] = values
        crs = nc.createVariable("crs", "i4")
        crs.setncatts({"grid_mapping_name": "latitude_longitude",
                       "semi_major_axis": 6378137.0, "inverse_flattening": 298.257223563})
        _write_fields(nc, rng, lat, lon)
        names = nc.createVariable("site_name", "S1", ("site", "name_strlen"))
        names.long_name = "station name"
        names[:] = netCDF4.stringtochar(np.array(["Boulder", "Greenbelt", "Ny-Alesund", "Davis"],
                                                 "S12"))
    return path


def _write_fields(nc: Any, rng: np.random.Generator, lat: np.ndarray, lon: np.ndarray) -> None:
    """tas (packed int16), pr (float32 with missing values) and orog (contiguous)."""
    dims = ("time", "lat", "lon")
    base = 288.0 - 40.0 * np.sin(np.radians(lat))[:, None] ** 2 + 3 * np.cos(np.radians(lon))
    days = np.arange(TIME_STEPS)[:, None, None]
    noise = rng.normal(0, 1.5, (TIME_STEPS, NLAT, NLON))
    tas_values = base + 5 * np.sin(2 * np.pi * days / 365) + noise
    tas = nc.createVariable("tas", "i2", dims, zlib=True, complevel=4, shuffle=True,
                            chunksizes=(TIME_CHUNK, NLAT // 2, NLON // 2), fill_value=-32767)
    tas.setncatts({"scale_factor": np.float32(0.01), "add_offset": np.float32(273.15),
                   "units": "K", "standard_name": "air_temperature", "grid_mapping": "crs",
                   "valid_min": np.int16(-20000), "valid_max": np.int16(20000)})
    tas[:] = tas_values  # netCDF4 packs with scale_factor/add_offset on write
    pr = nc.createVariable("pr", "f4", dims, zlib=True, complevel=4,
                           chunksizes=(TIME_CHUNK, NLAT, NLON), fill_value=np.float32(1e20))
    pr.setncatts({"units": "kg m-2 s-1", "standard_name": "precipitation_flux",
                  "grid_mapping": "crs", "cell_methods": "time: mean"})
    rain = rng.gamma(0.5, 2e-5, (TIME_STEPS, NLAT, NLON)).astype("f4")
    pr[:] = np.ma.masked_array(rain, mask=rng.random(rain.shape) < 0.05)  # 5% missing
    orog = nc.createVariable("orog", "f4", ("lat", "lon"), contiguous=True)
    orog.setncatts({"units": "m", "standard_name": "surface_altitude", "grid_mapping": "crs"})
    orog[:] = np.maximum(0, 3000 * np.sin(np.radians(lon))[None, :]
                         * np.cos(np.radians(lat))[:, None]).astype("f4")
