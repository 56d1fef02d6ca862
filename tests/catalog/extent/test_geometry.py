"""Footprints, bounding-box unions and time decoding (pure functions, synthetic inputs)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from h5sidecar.catalog.extent._bbox_union import union_bbox
from h5sidecar.catalog.extent._geometry import Track, grid_footprint, track_footprint
from h5sidecar.catalog.extent._time_range import (
    decode_cf_range,
    gps_to_utc,
    parse_iso,
    time_range_from_attrs,
)
from tests.catalog._geo import inside_bbox, inside_geometry

UTC = dt.UTC


def _great_circle(lat0: float, lon0: float, heading_deg: float, n: int, step_m: float,
                  offset_m: float = 0.0, noise_m: float = 0.0, seed: int = 0) -> Track:
    """Points along a great circle from (lat0, lon0), shifted ``offset_m`` to the right."""
    rng = np.random.default_rng(seed)
    r = 6_371_008.8
    d = np.arange(n) * step_m / r
    la0, lo0, hd = np.radians(lat0), np.radians(lon0), np.radians(heading_deg)
    lat = np.arcsin(np.sin(la0) * np.cos(d) + np.cos(la0) * np.sin(d) * np.cos(hd))
    lon = lo0 + np.arctan2(np.sin(hd) * np.sin(d) * np.cos(la0), np.cos(d) - np.sin(la0) * np.sin(lat))
    # cross-track offset: move perpendicular (heading + 90) by offset + noise
    xo = (offset_m + rng.normal(0, noise_m, n) if noise_m else np.full(n, offset_m)) / r
    h2 = hd + np.pi / 2
    lat2 = np.arcsin(np.sin(lat) * np.cos(xo) + np.cos(lat) * np.sin(xo) * np.cos(h2))
    lon2 = lon + np.arctan2(np.sin(h2) * np.sin(xo) * np.cos(lat), np.cos(xo) - np.sin(lat) * np.sin(lat2))
    lon2 = (np.degrees(lon2) + 180.0) % 360.0 - 180.0
    return Track(lat=np.degrees(lat2), lon=lon2, t=np.arange(n, dtype="f8"))


def _beams(lat0: float, lon0: float, heading: float, n: int = 3000) -> list[Track]:
    return [_great_circle(lat0, lon0, heading, n, 20.0, offset_m=off, noise_m=3.0, seed=k)
            for k, off in enumerate((-3300.0, -3210.0, 0.0, 90.0, 3300.0, 3390.0))]


def _all_points(tracks: list[Track]) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([t.lon for t in tracks]), np.concatenate([t.lat for t in tracks])


@pytest.mark.parametrize(("lat0", "lon0", "heading"), [
    (12.8, -0.5, 352.0),    # ascending, near the prime meridian
    (-60.0, 45.0, 190.0),   # descending, southern hemisphere
    (86.5, 10.0, 60.0),     # near ICESat-2's turning latitude
])
def test_track_footprint_holds_every_point(lat0: float, lon0: float, heading: float) -> None:
    tracks = _beams(lat0, lon0, heading)
    fp = track_footprint(tracks, n_vertices=24, margin_m=50.0)
    lon, lat = _all_points(tracks)
    assert fp.geometry["type"] == "Polygon"
    assert inside_geometry(fp.geometry, lon, lat).all()
    assert inside_bbox(fp.bbox, lon, lat).all()
    ring = fp.geometry["coordinates"][0]
    assert ring[0] == ring[-1] and len(ring) <= 2 * 24 + 1
    # tight: the box exceeds the data by little more than the margin (50 m ~ 0.0005 deg lat)
    assert fp.bbox[1] > lat.min() - 0.01 and fp.bbox[3] < lat.max() + 0.01
    # counterclockwise exterior ring (RFC 7946): positive shoelace area
    x, y = np.asarray(ring).T
    assert np.sum(x[:-1] * y[1:] - x[1:] * y[:-1]) > 0


def test_track_crossing_the_antimeridian_is_split() -> None:
    tracks = _beams(10.0, 179.95, 80.0, n=2000)  # heading east across 180
    lon, lat = _all_points(tracks)
    assert (lon > 179).any() and (lon < -179).any()
    fp = track_footprint(tracks)
    assert fp.geometry["type"] == "MultiPolygon"
    west, _, east, _ = fp.bbox
    assert west > east  # crossing box (RFC 7946 section 5.2)
    assert inside_geometry(fp.geometry, lon, lat).all()
    assert inside_bbox(fp.bbox, lon, lat).all()
    for poly in fp.geometry["coordinates"]:
        xs = np.asarray(poly[0])[:, 0]
        assert xs.min() >= -180 and xs.max() <= 180


def test_track_footprint_refuses_no_data() -> None:
    empty = Track(np.array([]), np.array([]), np.array([]))
    with pytest.raises(ValueError, match="no finite latitude"):
        track_footprint([empty])


def test_grid_footprint_global_regional_and_crossing() -> None:
    glob = grid_footprint(np.linspace(-89, 89, 90), np.linspace(0, 358, 180))
    assert glob.bbox == [-180.0, -89.0, 180.0, 89.0]
    reg = grid_footprint(np.linspace(30, 40, 11), np.linspace(200, 210, 11))  # 0..360 input
    assert reg.bbox == [-160.0, 30.0, -150.0, 40.0]
    cross = grid_footprint(np.linspace(-5, 5, 3), np.linspace(170, 190, 21))
    assert cross.bbox[0] == 170.0 and cross.bbox[2] == -170.0
    assert cross.geometry["type"] == "MultiPolygon"


def test_union_bbox() -> None:
    assert union_bbox([[10, 0, 20, 5], [30, -5, 40, 1]]) == [10.0, -5.0, 40.0, 5.0]
    # both sides of the antimeridian: a crossing box, not the whole globe
    assert union_bbox([[170, 0, 175, 1], [-175, 2, -170, 3]]) == [170.0, 0.0, -170.0, 3.0]
    assert union_bbox([[170, 0, -175, 1], [-100, 0, 100, 1]]) == [-100.0, 0.0, -175.0, 1.0]
    assert union_bbox([[-180, 0, 180, 1], [0, -3, 1, 2]]) == [-180.0, -3.0, 180.0, 2.0]
    with pytest.raises(ValueError):
        union_bbox([])


def test_gps_to_utc_counts_leap_seconds() -> None:
    # ATLAS SDP epoch: GPS seconds 1198800018 is 2018-01-01T00:00:00Z (18 leap seconds)
    assert gps_to_utc(1_198_800_018) == dt.datetime(2018, 1, 1, tzinfo=UTC)
    # before the first leap second (1981-07-01) GPS and UTC agree
    assert gps_to_utc(86400.0) == dt.datetime(1980, 1, 7, tzinfo=UTC)
    # 2016-12-31T23:59:59Z is 17 s behind GPS; 2017-01-01T00:00:00Z 18 s
    naive = (dt.datetime(2017, 1, 1, tzinfo=UTC) - dt.datetime(1980, 1, 6, tzinfo=UTC)).total_seconds()
    assert gps_to_utc(naive + 18) == dt.datetime(2017, 1, 1, tzinfo=UTC)
    assert gps_to_utc(naive + 16) == dt.datetime(2016, 12, 31, 23, 59, 59, tzinfo=UTC)


def test_decode_cf_range() -> None:
    values = np.array([np.nan, 7305.5, 7306.0, 7329.5])
    start, end = decode_cf_range(values, {"units": "days since 2000-01-01 00:00:00"})
    assert start == dt.datetime(2020, 1, 1, 12, tzinfo=UTC)
    assert end == dt.datetime(2020, 1, 25, 12, tzinfo=UTC)
    assert decode_cf_range(values, {"units": "days since 2000-01-01", "calendar": "360_day"}) \
        is None
    assert decode_cf_range(values, {"units": "meters"}) is None
    gps = decode_cf_range(np.array([0.0, 10.5]), {"units": "seconds since 2018-01-01"},
                          gps_epoch_seconds=1_198_800_018)
    assert gps == (dt.datetime(2018, 1, 1, tzinfo=UTC),
                   dt.datetime(2018, 1, 1, 0, 0, 10, 500000, tzinfo=UTC))


def test_parse_iso_and_attribute_ranges() -> None:
    assert parse_iso("2019-03-29T13:06:45.000000Z") == dt.datetime(2019, 3, 29, 13, 6, 45,
                                                                     tzinfo=UTC)
    assert parse_iso(b"2019-03-29 13:06:45.1234567") == dt.datetime(2019, 3, 29, 13, 6, 45,
                                                                      123456, tzinfo=UTC)
    assert parse_iso("2019-03-29T15:06:45+02:00") == dt.datetime(2019, 3, 29, 13, 6, 45,
                                                                   tzinfo=UTC)
    assert parse_iso("yesterday") is None and parse_iso(3) is None
    assert time_range_from_attrs({"time_coverage_start": "2020-01-01",
                                  "time_coverage_end": "2020-01-02"}) == (
        dt.datetime(2020, 1, 1, tzinfo=UTC), dt.datetime(2020, 1, 2, tzinfo=UTC))
    assert time_range_from_attrs({"title": "no time"}) is None
