"""Find, from a sidecar's metadata alone, the variables that locate a granule in space and time.

Nothing here reads data: it inspects :class:`~h5sidecar.references.GranuleRefs` (names,
dimensions, CF attributes) and names the arrays :mod:`h5sidecar.catalog.extent._granule_extent` will read.

* **Along-track products** (ICESat-2 ATL03-like): in each top-level group (a beam), the
  latitude/longitude pair with the *fewest* points for the footprint (ATL03:
  ``geolocation/reference_photon_lat``/``_lon`` at the 20 m segment rate rather than every
  photon), and the time variable of the pair with the *most* points for the time range (ATL03:
  ``heights/delta_time`` of the photons).
* **Gridded products** (CF): 1-D coordinate variables with latitude/longitude units or standard
  names, and the CF time coordinate (with its ``bounds`` when present).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from h5sidecar.references import ArrayRefs, GranuleRefs

__all__ = ["Locators", "TrackVars", "find_locators", "gps_epoch_variable"]

_LAT_UNITS = {"degrees_north", "degree_north", "degrees_n", "degree_n", "degreesn", "degreen"}
_LON_UNITS = {"degrees_east", "degree_east", "degrees_e", "degree_e", "degreese", "degreee"}
_LAT_NAMES = {"lat", "latitude", "nav_lat"}
_LON_NAMES = {"lon", "long", "longitude", "nav_lon"}


@dataclass(frozen=True)
class TrackVars:
    """Arrays of one along-track line: latitude, longitude and (optional) time paths."""

    lat: str
    lon: str
    time: str | None


@dataclass(frozen=True)
class Locators:
    """What to read to locate a granule.

    Attributes
    ----------
    kind : "track", "grid" or "none"
    tracks : tuple of TrackVars
        Along-track lines (``kind == "track"``).
    grid_lat, grid_lon : str or None
        Coordinate variables of a grid (``kind == "grid"``).
    times : tuple of str
        Time variables to decode for the time range (for tracks: the finest rate's; for grids:
        the time coordinate's bounds variable when it has one, else the coordinate).
    """

    kind: Literal["track", "grid", "none"]
    tracks: tuple[TrackVars, ...] = ()
    grid_lat: str | None = None
    grid_lon: str | None = None
    times: tuple[str, ...] = ()


def _units(arr: ArrayRefs) -> str:
    return str(arr.meta.attrs.get("units", "")).strip().lower().replace(" ", "_")


def _role(path: str, arr: ArrayRefs) -> Literal["lat", "lon", "time"] | None:
    """Whether an array holds latitudes, longitudes or CF times (by attributes, then name)."""
    attrs: Mapping[str, Any] = arr.meta.attrs
    std = str(attrs.get("standard_name", "")).lower()
    units = _units(arr)
    name = path.rpartition("/")[2].lower()
    if std == "latitude" or units in _LAT_UNITS or (name in _LAT_NAMES and not units):
        return "lat"
    if std == "longitude" or units in _LON_UNITS or (name in _LON_NAMES and not units):
        return "lon"
    if std == "time" or (" since " in units.replace("_", " ") and attrs.get("axis") != "Z"):
        return "time"
    return None


def _numeric(arr: ArrayRefs) -> bool:
    return arr.meta.numpy_dtype.kind in "iuf"


def _is_coordinate(path: str, arr: ArrayRefs) -> bool:
    """A 1-D array named like its own dimension (a CF coordinate variable)."""
    name = path.rpartition("/")[2]
    return len(arr.meta.shape) == 1 and arr.meta.dimension_names[:1] == (name,)


def _time_of(refs: GranuleRefs, lat_path: str, lat: ArrayRefs) -> str | None:
    """The time variable of a lat/lon pair: its dimension's coordinate, or one it names."""
    group = lat_path.rpartition("/")[0]
    prefix = f"{group}/" if group else ""
    names = list(lat.meta.dimension_names[:1])
    names += str(lat.meta.attrs.get("coordinates", "")).split()
    for name in names:
        cand = refs.arrays.get(prefix + name)
        if (cand is not None and _role(prefix + name, cand) == "time" and _numeric(cand)
                and cand.meta.shape == lat.meta.shape):
            return prefix + name
    return None


def _track_pairs(refs: GranuleRefs) -> dict[str, list[tuple[int, TrackVars]]]:
    """Along-track lat/lon pairs per top-level group, with their number of points."""
    by_group: dict[str, list[tuple[int, TrackVars]]] = {}
    arrays = refs.arrays
    for path, arr in arrays.items():
        if _role(path, arr) != "lat" or not _numeric(arr) or _is_coordinate(path, arr):
            continue
        if len(arr.meta.shape) != 1 or arr.meta.shape[0] < 2:
            continue
        group, _, _ = path.rpartition("/")
        prefix = f"{group}/" if group else ""
        lon_path = next(
            (p for p, a in arrays.items()
             if p.rpartition("/")[0] == group and p.startswith(prefix) and _role(p, a) == "lon"
             and a.meta.shape == arr.meta.shape and _numeric(a)),
            None,
        )
        if lon_path is None:
            continue
        top = path.split("/", 1)[0] if "/" in path else ""
        tv = TrackVars(lat=path, lon=lon_path, time=_time_of(refs, path, arr))
        by_group.setdefault(top, []).append((arr.meta.shape[0], tv))
    return by_group


def _grid(refs: GranuleRefs) -> tuple[str, str] | None:
    lat = lon = None
    for path, arr in refs.arrays.items():
        if not _numeric(arr) or not _is_coordinate(path, arr):
            continue
        role = _role(path, arr)
        if role == "lat" and lat is None:
            lat = path
        elif role == "lon" and lon is None:
            lon = path
    return (lat, lon) if lat and lon else None


def _grid_times(refs: GranuleRefs) -> tuple[str, ...]:
    out = []
    for path, arr in refs.arrays.items():
        if _role(path, arr) != "time" or not _numeric(arr) or not _is_coordinate(path, arr):
            continue
        group = path.rpartition("/")[0]
        bounds = str(arr.meta.attrs.get("bounds", ""))
        bpath = f"{group}/{bounds}" if group and bounds else bounds
        # cell bounds give the true coverage of the first and last time steps
        out.append(bpath if bounds and bpath in refs.arrays else path)
    return tuple(out)


def find_locators(refs: GranuleRefs) -> Locators:
    """The variables that give a granule's footprint and time range (see module docstring)."""
    pairs = _track_pairs(refs)
    if pairs:
        groups = [cands for _, cands in sorted(pairs.items())]
        tracks = tuple(min(cands, key=lambda c: c[0])[1] for cands in groups)
        # time from the finest rate (photons): its first and last values are the coverage
        finest = (max(cands, key=lambda c: c[0])[1] for cands in groups)
        times = tuple(t.time for t in finest if t.time)
        return Locators(kind="track", tracks=tracks, times=times)
    grid = _grid(refs)
    if grid is not None:
        return Locators(kind="grid", grid_lat=grid[0], grid_lon=grid[1], times=_grid_times(refs))
    return Locators(kind="none", times=_grid_times(refs))


def gps_epoch_variable(refs: GranuleRefs) -> str | None:
    """ATLAS products count ``delta_time`` from a GPS epoch stored in ``atlas_sdp_gps_epoch``."""
    for path in ("ancillary_data/atlas_sdp_gps_epoch", "atlas_sdp_gps_epoch"):
        if path in refs.arrays and _numeric(refs.arrays[path]):
            return path
    return None
