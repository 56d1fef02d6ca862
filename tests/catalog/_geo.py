"""Point-in-footprint checks for the tests (GeoJSON polygons in the lon/lat plane)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.path import Path


def polygons(geometry: dict[str, Any]) -> list[np.ndarray]:
    """Exterior rings of a Polygon or MultiPolygon as (n, 2) lon/lat arrays."""
    if geometry["type"] == "Polygon":
        return [np.asarray(geometry["coordinates"][0], dtype="f8")]
    assert geometry["type"] == "MultiPolygon", geometry["type"]
    return [np.asarray(p[0], dtype="f8") for p in geometry["coordinates"]]


def inside_geometry(geometry: dict[str, Any], lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Which points lie inside the geometry (longitudes in -180..180)."""
    lon = ((np.asarray(lon, dtype="f8") + 180.0) % 360.0) - 180.0
    pts = np.stack([lon, np.asarray(lat, dtype="f8")], axis=1)
    hit = np.zeros(len(pts), dtype=bool)
    for ring in polygons(geometry):
        hit |= Path(ring).contains_points(pts)
    return hit


def inside_bbox(bbox: list[float], lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Which points lie inside a [w, s, e, n] box (west > east crosses the antimeridian)."""
    w, s, e, n = bbox
    lon = ((np.asarray(lon, dtype="f8") + 180.0) % 360.0) - 180.0
    in_lat = (lat >= s) & (lat <= n)
    in_lon = (lon >= w) & (lon <= e) if w <= e else (lon >= w) | (lon <= e)
    return in_lat & in_lon
