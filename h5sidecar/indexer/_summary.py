"""Coordinate summaries taken once at index time, so the catalog need not read values again.

For every small numeric variable whose attributes say it is a latitude, a longitude or a CF
time (``units`` ``degrees_north``/``degrees_east``/``... since ...``, or the matching
``standard_name``), the sidecar's extras record, under ``extra["coordinate_summary"]``::

    {path: {"min": float, "max": float, "finite": int,     # over the finite values
            "ends": [first, last],                          # 1-D variables of more than 2
            "lon_arc": [west, east]}}                       # longitudes only

Values are taken as xarray's CF decoding gives them to the catalog (``_FillValue`` and
``missing_value`` masked; float64), so what the catalog derives from a summary equals what it
derives from the values.  Packed variables (``scale_factor``/``add_offset``: xarray's unpacking
dtype is not repeated here) and variables of more than :data:`MAX_VALUES` values (along-track
positions: their footprint needs every point) are not summarised; the catalog reads those.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["MAX_VALUES", "SUMMARY_KEY", "add_summary", "longitude_arc", "summarise"]

log = logging.getLogger("h5sidecar.indexer")

SUMMARY_KEY = "coordinate_summary"
#: Largest variable summarised.  Its values are read and decoded at index time, so this stays
#: at the size of grid axes (a 1 km global grid has ~40,000 longitudes): at 1,000,000 the
#: along-track photon arrays of a 70 MB ATL03-like granule were read too, a quarter of its
#: index time, for footprints the catalog must read point by point anyway.
MAX_VALUES = 100_000
_LAT = ("degrees_north", "degree_north", "degrees_n", "degree_n")
_LON = ("degrees_east", "degree_east", "degrees_e", "degree_e")


def longitude_arc(lon: np.ndarray) -> tuple[float, float]:
    """(west, east) of the shortest arc holding every longitude in [-180, 180).

    ``(-180, 180)`` when the values are spread evenly around the globe (no gap wider than twice
    the median spacing); west > east when the arc crosses the antimeridian.
    """
    s = np.sort(np.ravel(lon))  # np.unique's own steps, without its general-case overhead
    if not s.size or np.isnan(s[-1]):  # (NaNs, sorted last, are collapsed by np.unique)
        u = np.unique(lon)
    else:
        u = s[np.concatenate(([True], s[1:] != s[:-1]))]
    if u.size == 1:
        return float(u[0]), float(u[0])
    gaps = np.diff(np.r_[u, u[0] + 360.0])
    spacing = float(np.median(gaps))
    i = int(np.argmax(gaps))
    if gaps[i] <= 2 * spacing:  # evenly spread all around: global
        return -180.0, 180.0
    return float(u[(i + 1) % u.size]), float(u[i])


def _kind(attrs: Mapping[str, Any]) -> str | None:
    units = str(attrs.get("units", "")).strip().lower()
    standard = str(attrs.get("standard_name", "")).strip().lower()
    if units in _LAT or standard == "latitude":
        return "lat"
    if units in _LON or standard == "longitude":
        return "lon"
    if " since " in units or standard == "time":
        return "time"
    return None


def _masked(values: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    out = values.astype("f8")
    for key in ("_FillValue", "missing_value"):
        if key in attrs:
            for fill in np.atleast_1d(np.asarray(attrs[key])).ravel():
                out[values == fill] = np.nan
    return out


#: ``lookup(dset, name) -> (known, value)``: an attribute's value as h5py reads it (``None``:
#: absent) when ``known`` without asking HDF5 (see ``NativeAttrs.lookup``).
Lookup = Callable[[Any, str], tuple[bool, Any]]


def _raw_attr(dset: Any, name: str, lookup: Lookup | None) -> Any:
    """``dset.attrs[name]``, ``None`` when there is no such attribute."""
    if lookup is not None:
        known, value = lookup(dset, name)
        if known:
            return value
    raw = dset.attrs  # not .get(): an absent name would cost HDF5 an error stack
    return raw[name] if name in raw else None  # noqa: SIM401


def summarise(dset: Any, attrs: Mapping[str, Any],
              lookup: Lookup | None = None) -> dict[str, Any] | None:  # fmt: skip
    """The summary of one h5py dataset (see module docs), or None when it is not summarised.

    ``attrs`` are the variable's decoded attributes (``units``, ``standard_name``); the fill
    values are taken from the dataset's own attributes, as h5netcdf and our engine mask them
    (from ``lookup`` where it knows them: HDF5 searches dense attribute storage by name).
    """
    kind = _kind(attrs)
    if kind is None:  # before h5py's attribute manager: most variables stop here
        return None
    if any(_raw_attr(dset, k, lookup) is not None
           for k in ("scale_factor", "add_offset", "_Unsigned")):  # fmt: skip
        return None
    if dset.dtype.kind not in "iuf" or not 0 < dset.size <= MAX_VALUES:
        return None
    found = {k: _raw_attr(dset, k, lookup) for k in ("_FillValue", "missing_value")}
    fills = {k: v for k, v in found.items() if v is not None}
    values = _masked(np.asarray(dset[()]), fills)
    finite = values[np.isfinite(values)].ravel()
    out: dict[str, Any] = {"finite": int(finite.size)}
    if finite.size:
        out["min"], out["max"] = float(finite.min()), float(finite.max())
    if values.ndim == 1 and values.size > 2:
        out["ends"] = [_json_float(values[0]), _json_float(values[-1])]
    if kind == "lon" and finite.size:
        out["lon_arc"] = list(longitude_arc(_wrapped(finite)))
    return out


def _wrapped(lon: np.ndarray) -> np.ndarray:
    """``((lon + 180) % 360) - 180``, the remainder skipped when it cannot change a value
    (every ``lon + 180`` in [0, 360), as with longitudes in [-180, 180): the usual case; the
    remainder is most of the summary's arithmetic on a long longitude array)."""
    shifted = lon + 180.0
    if not shifted.size or shifted.min() < 0.0 or shifted.max() >= 360.0:
        shifted %= 360.0
    return shifted - 180.0


def _json_float(v: Any) -> float | None:
    f = float(v)
    return f if np.isfinite(f) else None


def add_summary(path: str, dset: Any, attrs: Mapping[str, Any], out: dict[str, Any],
                lookup: Lookup | None = None) -> None:  # fmt: skip
    """Add the summary of one indexed variable to ``out`` (by path), when it has one."""
    try:
        summary = summarise(dset, attrs, lookup)
    except (OSError, ValueError, TypeError) as exc:
        # values h5py cannot decode (a filter it lacks): the references stand without a
        # summary, and the catalog reads the values its own way
        log.debug("no coordinate summary for %s: %s", path, exc)
        return
    if summary is not None:
        out[path] = summary
