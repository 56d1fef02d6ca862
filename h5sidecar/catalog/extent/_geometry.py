"""GeoJSON footprints and bounding boxes from latitude/longitude data.

Along-track data (ICESat-2 ground tracks): the beams' positions are averaged into a centre line of
a few dozen vertices (on the sphere, through 3-D unit vectors, so neither the antimeridian nor
the dateline-crossing average of 179 and -179 is a problem), and the footprint is that line
buffered by the largest cross-track distance of any data point plus a margin, so every point
lies inside it.  Gridded data: the box of the grid's coordinates.  Granules whose coordinates
give no footprint (projected x/y only): the box of their ACDD ``geospatial_*`` bounds.

A footprint that crosses the antimeridian is split into a ``MultiPolygon`` at +/-180 degrees
(RFC 7946, section 3.1.9) and its ``bbox`` has west > east (section 5.2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from h5sidecar.indexer import longitude_arc

__all__ = [
    "ACDD_BOUNDS", "EARTH_RADIUS_M", "Footprint", "Track", "acdd_footprint", "grid_box",
    "grid_footprint",
    "track_footprint",
]  # fmt: skip

EARTH_RADIUS_M = 6_371_008.8


@dataclass(frozen=True)
class Track:
    """Positions of one beam (or any along-track line), ordered by ``t``.

    ``t`` is any increasing measure of along-track position: time in seconds, or the index.
    """

    lat: np.ndarray
    lon: np.ndarray
    t: np.ndarray


@dataclass(frozen=True)
class Footprint:
    """A GeoJSON geometry and its bbox ``[west, south, east, north]``."""

    geometry: dict[str, Any]
    bbox: list[float]


# -- sphere helpers -----------------------------------------------------------------------------
def _to_xyz(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    la, lo = np.radians(lat), np.radians(lon)
    return np.stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)], axis=-1)


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _to_latlon(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = _unit(v)
    return np.degrees(np.arcsin(np.clip(v[..., 2], -1, 1))), np.degrees(
        np.arctan2(v[..., 1], v[..., 0])
    )


def _centre_line(tracks: Sequence[Track], n_vertices: int) -> np.ndarray:
    """Unit vectors of the mean position of all tracks at ``n_vertices`` evenly spaced ``t``."""
    t0 = min(float(tr.t.min()) for tr in tracks)
    t1 = max(float(tr.t.max()) for tr in tracks)
    ts = np.linspace(t0, t1, n_vertices) if t1 > t0 else np.array([t0, t0 + 1.0])
    total = np.zeros((ts.size, 3))
    for tr in tracks:
        xyz = _to_xyz(tr.lat, tr.lon)
        # interpolating unit vectors component-wise is exact enough between close points
        total += np.stack([np.interp(ts, tr.t, xyz[:, k]) for k in range(3)], axis=-1)
    line = _unit(total)
    keep = np.r_[True, np.any(np.abs(np.diff(line, axis=0)) > 1e-12, axis=1)]
    return line[keep]


def _segment_frames(line: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per segment: unit normal of its great circle and its length (radians)."""
    a, b = line[:-1], line[1:]
    normal = np.cross(a, b)
    length = np.arctan2(np.linalg.norm(normal, axis=-1), np.einsum("ij,ij->i", a, b))
    norm = np.linalg.norm(normal, axis=-1, keepdims=True)
    # a zero-length segment (stationary track) gets any normal perpendicular to it
    fallback = _unit(np.cross(a, np.where(np.abs(a[:, [2]]) < 0.9, [0, 0, 1.0], [1.0, 0, 0])))
    normal = np.where(norm > 1e-15, normal / np.maximum(norm, 1e-300), fallback)
    return normal, length


def _extent_from_line(points: np.ndarray, line: np.ndarray) -> tuple[float, float, float]:
    """Largest cross-track angle of ``points`` from ``line``, and how far they reach beyond its
    start and end along track (radians, >= 0)."""
    normal, length = _segment_frames(line)
    last_seg = len(length) - 1
    # candidate segments of each point: the two around its nearest vertex
    vertex = np.argmax(points @ line.T, axis=1)
    dist = np.full(len(points), np.inf)
    before, after = 0.0, 0.0
    for seg in (np.minimum(vertex, last_seg), np.maximum(vertex - 1, 0)):
        n, a, b = normal[seg], line[seg], line[seg + 1]
        across = np.abs(np.arcsin(np.clip(np.einsum("ij,ij->i", points, n), -1, 1)))
        proj = points - np.einsum("ij,ij->i", points, n)[:, None] * n
        along = np.arctan2(np.einsum("ij,ij->i", np.cross(a, proj), n),
                           np.einsum("ij,ij->i", a, proj))
        # beyond the line's ends the buffer is extended along track, so only the cross-track
        # distance counts there; beyond an interior vertex, the distance to that vertex
        inside = (along >= 0) & (along <= length[seg])
        inside |= ((seg == 0) & (along < 0)) | ((seg == last_seg) & (along > length[seg]))
        to_end = np.minimum(_angle(points, a), _angle(points, b))
        dist = np.minimum(dist, np.where(inside, across, to_end))
        first, last = (seg == 0) & (along < 0), (seg == last_seg) & (along > length[seg])
        if np.any(first):
            before = max(before, float(-along[first].min()))
        if np.any(last):
            after = max(after, float((along[last] - length[seg][last]).max()))
    return float(dist.max()), before, after


def _angle(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Great-circle angle between rows of unit vectors (accurate for small angles)."""
    return np.arctan2(np.linalg.norm(np.cross(p, q), axis=-1), np.einsum("ij,ij->i", p, q))


def _move(p: np.ndarray, direction: np.ndarray, angle: float) -> np.ndarray:
    """Point ``angle`` radians from unit vector ``p`` towards the unit tangent ``direction``."""
    return np.cos(angle) * p + np.sin(angle) * direction


def _buffer_ring(line: np.ndarray, half_width: float, before: float, after: float) -> np.ndarray:
    """Closed ring (unit vectors) around ``line``: left side forward, right side back."""
    normal, _ = _segment_frames(line)
    # extend the ends along the track so points beyond the first/last vertex are covered
    start_dir = _unit(np.cross(normal[0], line[0]))
    end_dir = _unit(np.cross(normal[-1], line[-1]))
    pts = line.copy()
    pts[0] = _unit(_move(line[0], -start_dir, before))
    pts[-1] = _unit(_move(line[-1], end_dir, after))
    # offset direction at each vertex: mean of the adjacent segments' normals
    vn = np.empty_like(pts)
    vn[0], vn[-1] = normal[0], normal[-1]
    if len(pts) > 2:
        vn[1:-1] = normal[:-1] + normal[1:]
    vn = _unit(vn - np.einsum("ij,ij->i", vn, pts)[:, None] * pts)
    left = _unit(_move(pts, vn, half_width))
    right = _unit(_move(pts, -vn, half_width))
    ring = np.concatenate([left, right[::-1], left[:1]])
    return ring


# -- planar ring helpers (lon/lat degrees) ------------------------------------------------------
def _unwrap_lon(lon: np.ndarray) -> np.ndarray:
    return np.degrees(np.unwrap(np.radians(lon)))


def _signed_area(ring: np.ndarray) -> float:
    x, y = ring[:, 0], ring[:, 1]
    return 0.5 * float(np.sum(x[:-1] * y[1:] - x[1:] * y[:-1]))


def _clip(ring: np.ndarray, x: float, keep_below: bool) -> np.ndarray:
    """Sutherland-Hodgman clip of a closed ring by the vertical line lon = x."""
    out: list[np.ndarray] = []
    pts = ring[:-1]
    inside = pts[:, 0] <= x if keep_below else pts[:, 0] >= x
    for i in range(len(pts)):
        p, q = pts[i], pts[(i + 1) % len(pts)]
        ip, iq = inside[i], inside[(i + 1) % len(pts)]
        if ip:
            out.append(p)
        if ip != iq:
            f = (x - p[0]) / (q[0] - p[0])
            out.append(np.array([x, p[1] + f * (q[1] - p[1])]))
    if len(out) < 3:
        return np.empty((0, 2))
    arr = np.array(out)
    return np.concatenate([arr, arr[:1]])


def _polygon_geometry(ring: np.ndarray) -> Footprint:
    """GeoJSON (Multi)Polygon of a ring given in continuous (unwrapped) lon/lat degrees."""
    if _signed_area(ring) < 0:
        ring = ring[::-1]  # RFC 7946: exterior rings counterclockwise
    shift = 360.0 * np.floor((ring[:, 0].min() + 180.0) / 360.0)
    ring = ring - [shift, 0.0]  # west edge now in [-180, 180)
    lat_lo, lat_hi = float(ring[:, 1].min()), float(ring[:, 1].max())
    if ring[:, 0].max() <= 180.0:
        coords = _rounded(ring)
        bbox = [float(ring[:, 0].min()), lat_lo, float(ring[:, 0].max()), lat_hi]
        return Footprint({"type": "Polygon", "coordinates": [coords]}, _round_bbox(bbox))
    east = _clip(ring, 180.0, keep_below=True)
    west = _clip(ring, 180.0, keep_below=False) - [360.0, 0.0]
    parts = [p for p in (east, west) if len(p)]
    geometry = {"type": "MultiPolygon", "coordinates": [[_rounded(p)] for p in parts]}
    bbox = [float(east[:, 0].min()), lat_lo, float(west[:, 0].max()), lat_hi]
    if bbox[0] <= bbox[2]:  # wider than the globe: no meaningful west/east
        bbox[0], bbox[2] = -180.0, 180.0
    return Footprint(geometry, _round_bbox(bbox))


def _rounded(ring: np.ndarray) -> list[list[float]]:
    # 7 decimals (~1 cm) keep documents small; the ring stays closed because ends are equal
    return [[round(float(x), 7), round(float(y), 7)] for x, y in ring]


def _round_bbox(bbox: list[float]) -> list[float]:
    # outward rounding so the rounded box still contains the rounded geometry
    w, s, e, n = bbox
    f = 1e7
    return [float(np.floor(w * f) / f), float(np.floor(s * f) / f),
            float(np.ceil(e * f) / f), float(np.ceil(n * f) / f)]


# -- public builders ----------------------------------------------------------------------------
def track_footprint(
    tracks: Sequence[Track], *, n_vertices: int = 24, margin_m: float = 100.0
) -> Footprint:
    """Buffered-polygon footprint of along-track data (all beams of a granule).

    Parameters
    ----------
    tracks : sequence of Track
        Finite positions of each beam (empty tracks are ignored).
    n_vertices : int
        Vertices of the centre line; the polygon has about twice as many.
    margin_m : float
        Metres added to the half-width and at both ends, so that data between the sampled
        positions (photons around their segment's reference photon) stays inside.

    Raises
    ------
    ValueError
        When no track has a finite position.
    """
    tracks = [tr for tr in tracks if tr.lat.size]
    if not tracks:
        raise ValueError("no finite latitude/longitude in the track variables")
    points = np.concatenate([_to_xyz(tr.lat, tr.lon) for tr in tracks])
    line = _centre_line(tracks, max(2, n_vertices))
    if len(line) < 2:
        line = np.stack([line[0], _unit(line[0] + [1e-9, 1e-9, 0])])
    width, before, after = _extent_from_line(points, line)
    margin = margin_m / EARTH_RADIUS_M
    ring_xyz = _buffer_ring(line, width + margin, before + margin, after + margin)
    lat, lon = _to_latlon(ring_xyz)
    return _polygon_geometry(np.stack([_unwrap_lon(lon), lat], axis=-1))


def grid_footprint(lat: np.ndarray, lon: np.ndarray) -> Footprint:
    """Box footprint of a latitude/longitude grid (1-D or 2-D coordinates, degrees).

    Longitudes in 0..360 are understood; the box takes the shortest longitude arc that holds
    every value (crossing the antimeridian if need be), or the whole globe when the values
    leave no gap wider than twice their spacing.
    """
    la = np.asarray(lat, dtype="f8").ravel()
    lo = np.asarray(lon, dtype="f8").ravel()
    la, lo = la[np.isfinite(la)], lo[np.isfinite(lo)]
    if la.size == 0 or lo.size == 0:
        raise ValueError("no finite latitude/longitude coordinate values")
    south, north = float(la.min()), float(la.max())
    west, east = longitude_arc(((lo + 180.0) % 360.0) - 180.0)
    return _box(west, south, east, north)


def grid_box(west: float, south: float, east: float, north: float) -> Footprint:
    """What :func:`grid_footprint` gives for coordinates whose latitudes span ``south..north``
    and whose longitudes' shortest arc is ``west..east`` (an index-time summary)."""
    return _box(west, south, east, north)


def _box(west: float, south: float, east: float, north: float) -> Footprint:
    """The box between two longitudes in [-180, 180] (west > east: across the antimeridian,
    split in two) and two latitudes."""
    if west <= east:
        ring = np.array([[west, south], [east, south], [east, north], [west, north], [west, south]])
        geometry = {"type": "Polygon", "coordinates": [_rounded(ring)]}
        return Footprint(geometry, _round_bbox([west, south, east, north]))
    parts = [
        np.array([[west, south], [180.0, south], [180.0, north], [west, north], [west, south]]),
        np.array([[-180.0, south], [east, south], [east, north], [-180.0, north], [-180.0, south]]),
    ]
    geometry = {"type": "MultiPolygon", "coordinates": [[_rounded(p)] for p in parts]}
    return Footprint(geometry, _round_bbox([west, south, east, north]))


#: ACDD global attributes of a granule's bounds, in degrees.
ACDD_BOUNDS = ("geospatial_lon_min", "geospatial_lat_min", "geospatial_lon_max",
               "geospatial_lat_max")  # fmt: skip


def acdd_footprint(attrs: Mapping[str, Any]) -> Footprint:
    """Box footprint from ACDD ``geospatial_lat_min/max`` and ``geospatial_lon_min/max``.

    ACDD 1.3: a ``geospatial_lon_min`` greater than ``geospatial_lon_max`` means the box
    crosses the antimeridian; longitudes in 0..360 are understood.  Numbers written as text
    (common in products) are read as numbers.

    Raises
    ------
    ValueError
        Saying which attribute is missing or unusable.
    """
    values = []
    for name in ACDD_BOUNDS:
        if name not in attrs:
            raise ValueError(f"no {name} attribute")
        try:
            value = float(np.asarray(attrs[name]).reshape(-1)[0])
        except (TypeError, ValueError, IndexError):
            raise ValueError(f"{name} = {attrs[name]!r} is not a number") from None
        if not math.isfinite(value):
            raise ValueError(f"{name} = {attrs[name]!r} is not finite")
        values.append(value)
    west, south, east, north = values
    if not -90.0 <= south <= north <= 90.0:
        raise ValueError(f"latitudes {south}..{north} are not a range within -90..90")
    if not (-180.0 <= west <= 360.0 and -180.0 <= east <= 360.0):
        raise ValueError(f"longitudes {west}..{east} are outside -180..360")
    if east - west >= 360.0:
        return _box(-180.0, south, 180.0, north)
    # 0..360 -> -180..180; an east edge on the antimeridian stays +180 (not -180)
    west = ((west + 180.0) % 360.0) - 180.0
    wrapped = ((east + 180.0) % 360.0) - 180.0
    east = 180.0 if wrapped == -180.0 and east > -180.0 else wrapped
    return _box(west, south, east, north)


