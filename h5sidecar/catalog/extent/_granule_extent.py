"""Read a granule's locating variables through its sidecar and derive footprint and time range.

Granules indexed with a coordinate summary (what the indexer records of small latitude,
longitude and time variables, see :mod:`h5sidecar.indexer._summary`) are located from it
without reading values: gridded ones with the same result as from the values; along-track ones
(ICESat-2-like) get the box of their tracks' recorded bounds, widened by ``margin_m`` (the
buffered polygon would need every point), and their time range from the recorded time
variables or else the ACDD ``time_coverage_*`` attributes.  Along-track granules without
summaries (indexed over S3, or before summaries were recorded) are located from their ACDD
``geospatial_*`` bounds and time attributes when both are there.  Only what none of these
locate is read as below (packed coordinates, sidecars of earlier versions, tracks without
ACDD attributes).

When the coordinates give no footprint (projected x/y only, or no finite value), the ACDD
``geospatial_*`` bounds do, as ACDD time attributes stand in for time variables.  Values are
read with the ``h5sidecar`` xarray engine (the same read path users get, selected by
name so this package does not import the gateway), undecoded (``decode_times=False``) but with
``_FillValue`` masked, so fill values never stretch a footprint or a time range.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np

from h5sidecar.catalog.extent._bbox_union import union_bbox
from h5sidecar.catalog.extent._geometry import (
    ACDD_BOUNDS,
    EARTH_RADIUS_M,
    Footprint,
    Track,
    acdd_footprint,
    grid_box,
    grid_footprint,
    track_footprint,
)
from h5sidecar.catalog.extent._probe import Locators, find_locators, gps_epoch_variable
from h5sidecar.catalog.extent._time_range import decode_cf_range, time_range_from_attrs
from h5sidecar.references import GranuleRefs

__all__ = ["GranuleExtent", "granule_extent"]


@dataclass(frozen=True)
class GranuleExtent:
    """Where and when a granule's data lie, and which variables said so.

    Attributes
    ----------
    footprint : Footprint or None
        From the latitude/longitude variables, else from the ACDD ``geospatial_*`` bounds;
        None when neither gives one (``no_footprint`` says why).
    start, end : datetime or None
        UTC time range; None when neither variables nor attributes give one.
    space_from : tuple of str
        The latitude/longitude variables read, or ``("attributes",)`` for ACDD bounds.
    time_from : str
        ``"variables: ..."``, ``"attributes"`` or ``""``.
    kind : "track", "grid" or "none"
    no_footprint : str
        Why there is no footprint (``""`` when there is one).
    """

    footprint: Footprint | None
    start: dt.datetime | None
    end: dt.datetime | None
    space_from: tuple[str, ...]
    time_from: str
    kind: Literal["track", "grid", "none"]
    no_footprint: str = ""


class _Reader:
    """Reads whole arrays, opening each group once."""

    def __init__(self, refs: GranuleRefs, open_kwargs: Mapping[str, Any]) -> None:
        self._refs = refs
        self._kw = dict(open_kwargs)
        self._groups: dict[str, Any] = {}

    def values(self, path: str, *, ends: bool = False) -> tuple[np.ndarray, Mapping[str, Any]]:
        """The array's values (masked fill as NaN) and attributes; with ``ends``, only the first
        and last element when the array is a CF coordinate variable (monotonic by convention),
        which reads two chunks instead of all of them."""
        import xarray as xr

        group, _, name = path.rpartition("/")
        if group not in self._groups:
            # the GranuleRefs itself (already parsed); chunks=None: no Dask, no tokenizing
            self._groups[group] = xr.open_dataset(
                cast(Any, self._refs), engine="h5sidecar", group=group or None, chunks=None,
                decode_times=False, decode_coords=False, decode_timedelta=False,
                mask_and_scale=True, **self._kw,
            )
        var = self._groups[group][name]
        attrs = dict(self._refs.arrays[path].meta.attrs)
        if ends and var.ndim == 1 and var.dims == (name,) and var.size > 2:
            edge = np.asarray(var.isel({name: [0, -1]}).values)
            if np.isfinite(edge.astype("f8")).all():
                return edge, attrs
        return np.asarray(var.values), attrs

    def close(self) -> None:
        for ds in self._groups.values():
            ds.close()


def _tracks(reader: _Reader, loc: Locators) -> list[Track]:
    out = []
    for tv in loc.tracks:
        lat, _ = reader.values(tv.lat)
        lon, _ = reader.values(tv.lon)
        t = reader.values(tv.time)[0].astype("f8") if tv.time else np.arange(lat.size, dtype="f8")
        ok = np.isfinite(lat) & np.isfinite(lon) & np.isfinite(t)
        ok &= (np.abs(lat) <= 90) & (np.abs(lon) <= 360)
        lat, lon, t = lat[ok].astype("f8"), lon[ok].astype("f8"), t[ok]
        order = np.argsort(t, kind="stable")
        out.append(Track(lat=lat[order], lon=lon[order], t=t[order]))
    return out


def _time_range(
    reader: _Reader, refs: GranuleRefs, loc: Locators
) -> tuple[dt.datetime | None, dt.datetime | None, str]:
    epoch_path = gps_epoch_variable(refs) if loc.kind == "track" else None
    gps_epoch = None
    if epoch_path is not None:
        epoch_values = reader.values(epoch_path)[0].ravel()
        if epoch_values.size and np.isfinite(epoch_values[0]):
            gps_epoch = float(epoch_values[0])
    ranges = []
    for path in loc.times:
        values, attrs = reader.values(path, ends=True)
        if "units" not in attrs:
            # a bounds variable carries no units: CF says they are its coordinate's
            attrs = _coordinate_attrs(refs, path) or attrs
        r = decode_cf_range(values, attrs, gps_epoch_seconds=gps_epoch)
        if r is not None:
            ranges.append(r)
    if ranges:
        via = f" + {epoch_path}" if gps_epoch is not None else ""
        return (min(r[0] for r in ranges), max(r[1] for r in ranges),
                f"variables: {', '.join(loc.times)}{via}")
    attr_range = time_range_from_attrs(refs.groups.get("", {}))
    if attr_range is not None:
        return attr_range[0], attr_range[1], "attributes"
    return None, None, ""


def _coordinate_attrs(refs: GranuleRefs, bounds_path: str) -> dict[str, Any] | None:
    group = bounds_path.rpartition("/")[0]
    for path, arr in refs.arrays.items():
        if path.rpartition("/")[0] == group and arr.meta.attrs.get("bounds") == \
                bounds_path.rpartition("/")[2]:
            return dict(arr.meta.attrs)
    return None


def granule_extent(
    refs: GranuleRefs,
    *,
    storage_options: Mapping[str, Any] | None = None,
    n_vertices: int = 24,
    margin_m: float = 100.0,
    track_footprints: Literal["recorded", "read"] = "recorded",
) -> GranuleExtent:
    """Footprint and UTC time range of a granule, read through its references.

    Parameters
    ----------
    refs : GranuleRefs
    storage_options : mapping, optional
        Options to read the granule's source (e.g. an S3 endpoint).
    n_vertices, margin_m :
        See :func:`~h5sidecar.catalog.extent._geometry.track_footprint`.
    track_footprints : {"recorded", "read"}
        Along-track granules: located from what was recorded (the box of the tracks' recorded
        bounds, else ACDD attributes; see module docs), or always read for the buffered polygon
        that follows the tracks (reads every track's positions from the source).
    """
    loc = find_locators(refs)
    recorded = None
    if loc.kind != "track" or track_footprints == "recorded":
        recorded = _from_summary(refs, loc, margin_m)
    if recorded is None and loc.kind == "track" and track_footprints == "recorded":
        recorded = _track_from_attributes(refs, loc)
    if recorded is not None:
        return recorded
    kw = {"storage_options": dict(storage_options)} if storage_options else {}
    reader = _Reader(refs, kw)
    try:
        footprint: Footprint | None = None
        space: tuple[str, ...] = ()
        if loc.kind == "track":
            tracks = [t for t in _tracks(reader, loc) if t.lat.size]
            if tracks:
                footprint = track_footprint(tracks, n_vertices=n_vertices, margin_m=margin_m)
                space = tuple(p for tv in loc.tracks for p in (tv.lat, tv.lon))
        elif loc.kind == "grid":
            assert loc.grid_lat is not None and loc.grid_lon is not None
            lat, _ = reader.values(loc.grid_lat)
            lon, _ = reader.values(loc.grid_lon)
            if np.isfinite(lat).any() and np.isfinite(lon).any():
                footprint = grid_footprint(lat, lon)
                space = (loc.grid_lat, loc.grid_lon)
        start, end, time_from = _time_range(reader, refs, loc)
    finally:
        reader.close()
    why = ""
    if footprint is None:
        footprint, why = _acdd_fallback(refs, loc)
        space = ("attributes",) if footprint is not None else ()
    return GranuleExtent(footprint, start, end, space, time_from, loc.kind, why)


def _acdd_fallback(refs: GranuleRefs, loc: Locators) -> tuple[Footprint | None, str]:
    """The ACDD bounds' footprint when the coordinates give none (as ACDD time attributes
    stand in for time variables), else why the granule has no footprint at all."""
    try:
        return acdd_footprint(refs.groups.get("", {})), ""
    except ValueError as exc:
        acdd = f"and its ACDD bounds ({', '.join(ACDD_BOUNDS)}) give none: {exc}"
    if loc.kind == "none":
        return None, f"no latitude/longitude variables were found, {acdd}"
    read: list[str | None] = [p for tv in loc.tracks for p in (tv.lat, tv.lon)]
    names = ", ".join(p for p in read or [loc.grid_lat, loc.grid_lon] if p)
    return None, f"the latitude/longitude variables ({names}) hold no finite value, {acdd}"



def _summary_times(
    refs: GranuleRefs, loc: Locators, summary: Mapping[str, Any]
) -> tuple[dt.datetime | None, dt.datetime | None, str] | None:
    """:func:`_time_range` from the recorded summaries (None when a time variable has none):
    a 1-D dimension coordinate's first and last values when both are finite (what the reader
    takes), else its finite minimum and maximum."""
    epoch_path = gps_epoch_variable(refs) if loc.kind == "track" else None
    gps_epoch = None
    if epoch_path is not None:
        epoch = summary.get(epoch_path)
        if epoch is None:
            return None
        gps_epoch = float(epoch["min"]) if epoch["finite"] else None
    ranges = []
    for path in loc.times:
        s = summary.get(path)
        if s is None:
            return None
        meta = refs.arrays[path].meta
        name = path.rpartition("/")[2]
        ends = s.get("ends")
        if (len(meta.shape) == 1 and tuple(meta.dimension_names) == (name,) and ends
                and None not in ends):
            values = np.asarray(ends, dtype="f8")
        else:
            values = np.asarray([s["min"], s["max"]] if s["finite"] else [], dtype="f8")
        attrs = dict(meta.attrs)
        if "units" not in attrs:
            attrs = _coordinate_attrs(refs, path) or attrs
        r = decode_cf_range(values, attrs, gps_epoch_seconds=gps_epoch)
        if r is not None:
            ranges.append(r)
    if ranges:
        via = f" + {epoch_path}" if gps_epoch is not None else ""
        return (min(r[0] for r in ranges), max(r[1] for r in ranges),
                f"variables: {', '.join(loc.times)}{via}")
    attr_range = time_range_from_attrs(refs.groups.get("", {}))
    if attr_range is not None:
        return attr_range[0], attr_range[1], "attributes"
    return None, None, ""


def _from_summary(refs: GranuleRefs, loc: Locators, margin_m: float) -> GranuleExtent | None:
    """The extent from the index-time coordinate summary, or None to read the values."""
    from h5sidecar.indexer import COORDINATE_SUMMARY_KEY

    summary = refs.extra.get(COORDINATE_SUMMARY_KEY)
    if not isinstance(summary, Mapping):
        return None
    footprint: Footprint | None = None
    space: tuple[str, ...] = ()
    if loc.kind == "track":
        boxes = []
        for tv in loc.tracks:
            lat, lon = summary.get(tv.lat), summary.get(tv.lon)
            if lat is None or lon is None:
                return None
            if lat["finite"] and lon["finite"]:
                boxes.append([lon["lon_arc"][0], lat["min"], lon["lon_arc"][1], lat["max"]])
        if boxes:
            footprint = grid_box(*_widened(union_bbox(boxes), margin_m))
            space = tuple(p for tv in loc.tracks for p in (tv.lat, tv.lon))
        times = _summary_times(refs, loc, summary)
        if times is None:  # photon times are too many to summarise: the ACDD attributes
            attr_range = time_range_from_attrs(refs.groups.get("", {}))
            if attr_range is None:
                return None
            times = (attr_range[0], attr_range[1], "attributes")
    elif loc.kind == "grid":
        assert loc.grid_lat is not None and loc.grid_lon is not None
        lat, lon = summary.get(loc.grid_lat), summary.get(loc.grid_lon)
        if lat is None or lon is None:
            return None
        if lat["finite"] and lon["finite"]:
            west, east = lon["lon_arc"]
            footprint = grid_box(west, lat["min"], east, lat["max"])
            space = (loc.grid_lat, loc.grid_lon)
    if loc.kind != "track":
        times = _summary_times(refs, loc, summary)
    if times is None:
        return None
    why = ""
    if footprint is None:
        footprint, why = _acdd_fallback(refs, loc)
        space = ("attributes",) if footprint is not None else ()
    return GranuleExtent(footprint, times[0], times[1], space, times[2], loc.kind, why)


def _track_from_attributes(refs: GranuleRefs, loc: Locators) -> GranuleExtent | None:
    """An along-track granule without summaries located by its ACDD bounds and time
    attributes (None when either is missing: its values are read)."""
    attrs = refs.groups.get("", {})
    times = time_range_from_attrs(attrs)
    if times is None:
        return None
    try:
        footprint = acdd_footprint(attrs)
    except ValueError:
        return None
    return GranuleExtent(footprint, times[0], times[1], ("attributes",), "attributes", loc.kind)


def _widened(box: list[float], margin_m: float) -> tuple[float, float, float, float]:
    """A box widened by ``margin_m`` on every side (as the buffered track polygon is: the data
    lie around the positions recorded), in longitude at its widest latitude; whole turns of
    longitude near the poles."""
    w, s, e, n = box
    d = float(np.degrees(margin_m / EARTH_RADIUS_M))
    s, n = max(-90.0, s - d), min(90.0, n + d)
    cos = float(np.cos(np.radians(max(abs(s), abs(n)))))
    dlon = 180.0 if cos <= 1e-6 else float(np.degrees(margin_m / EARTH_RADIUS_M / cos))
    span = (e - w) % 360.0 if w != e else 0.0
    if span + 2 * dlon >= 360.0 or (w, e) == (-180.0, 180.0):
        return -180.0, s, 180.0, n
    w, e = w - dlon, e + dlon
    w = w + 360.0 if w < -180.0 else w
    e = e - 360.0 if e > 180.0 else e
    return w, s, e, n
