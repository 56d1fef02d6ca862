"""Along-track granules are located from what the indexer recorded, without reading the
source: the box of the tracks' recorded bounds (every photon of h5py inside, hugging them) and
the time range; without summaries (indexed over S3) their ACDD attributes; only without either
are the values read (the buffered polygon, as before)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.catalog import granule_extent
from h5sidecar.references import GranuleRefs, read_refs
from tests.catalog._geo import inside_bbox, inside_geometry

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
GPS_EPOCH = dt.datetime(1980, 1, 6, tzinfo=dt.UTC)
ACDD = ("geospatial_lat_min", "geospatial_lat_max", "geospatial_lon_min", "geospatial_lon_max")


@pytest.fixture(scope="module")
def granule(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GranuleRefs]:
    from h5sidecar.sample import granule_name, write_atl03_like
    from h5sidecar.workflows import index_many

    root = tmp_path_factory.mktemp("track")
    (root / "src").mkdir()
    src = write_atl03_like(root / "src" / granule_name(3), photons=20_000, seed=3)
    index_many(str(src), str(root / "dest"), format="json", executor="serial")
    return src, read_refs(str(next((root / "dest").rglob("*.json"))))


def _photons(src: Path) -> tuple[np.ndarray, np.ndarray, dt.datetime, dt.datetime]:
    with h5py.File(src) as f:
        present = [b for b in BEAMS if f"{b}/heights/lat_ph" in f]
        lat = np.concatenate([f[f"{b}/heights/lat_ph"][:] for b in present])
        lon = np.concatenate([f[f"{b}/heights/lon_ph"][:] for b in present])
        t = np.concatenate([f[f"{b}/heights/delta_time"][:] for b in present])
        epoch = float(f["ancillary_data/atlas_sdp_gps_epoch"][0])
    leap = 18  # GPS - UTC since 2017
    return (lat, lon, GPS_EPOCH + dt.timedelta(seconds=epoch + t.min() - leap),
            GPS_EPOCH + dt.timedelta(seconds=epoch + t.max() - leap))  # fmt: skip


def _unreadable(refs: GranuleRefs, tmp_path: Path) -> GranuleRefs:
    """The references with their source moved away: any read fails."""
    gone = f"{tmp_path}/gone.h5"
    return dataclasses.replace(refs, source=dataclasses.replace(refs.source, url=gone))


def _without(refs: GranuleRefs, *, summary: bool = False, acdd: bool = False) -> GranuleRefs:
    extra = {k: v for k, v in refs.extra.items() if not (summary and k == "coordinate_summary")}
    groups = dict(refs.groups)
    if acdd:
        groups[""] = {k: v for k, v in groups[""].items() if k not in ACDD}
    return dataclasses.replace(refs, extra=extra, groups=groups)


def test_recorded_bounds_locate_a_track_without_reading(granule: tuple[Path, GranuleRefs],
                                                       tmp_path: Path) -> None:  # fmt: skip
    src, refs = granule
    assert "coordinate_summary" in refs.extra
    lat, lon, start, end = _photons(src)
    ext = granule_extent(_unreadable(refs, tmp_path))
    assert ext.footprint is not None and ext.space_from[0].endswith("reference_photon_lat")
    assert inside_geometry(ext.footprint.geometry, lon, lat).all()
    assert inside_bbox(ext.footprint.bbox, lon, lat).all()
    # the segments' reference positions reach a little past the photons of a short granule
    w, s, e, n = ext.footprint.bbox
    assert abs(w - lon.min()) < 0.05 and abs(e - lon.max()) < 0.05
    assert abs(s - lat.min()) < 0.05 and abs(n - lat.max()) < 0.05
    # the time range: the photons' (recorded, or the granule's own attributes to 1 ms)
    assert ext.start is not None and ext.end is not None
    assert abs(ext.start - start) < dt.timedelta(milliseconds=1)
    assert abs(ext.end - end) < dt.timedelta(milliseconds=1)


def test_without_summaries_the_acdd_attributes_locate_it(granule: tuple[Path, GranuleRefs],
                                                         tmp_path: Path) -> None:  # fmt: skip
    _, refs = granule
    ext = granule_extent(_unreadable(_without(refs, summary=True), tmp_path))
    attrs = refs.groups[""]
    assert ext.space_from == ("attributes",) and ext.time_from == "attributes"
    assert ext.footprint is not None
    assert ext.footprint.bbox == pytest.approx([attrs["geospatial_lon_min"],
                                                attrs["geospatial_lat_min"],
                                                attrs["geospatial_lon_max"],
                                                attrs["geospatial_lat_max"]])  # fmt: skip


def test_without_either_the_values_are_read(granule: tuple[Path, GranuleRefs],
                                            tmp_path: Path) -> None:  # fmt: skip
    src, refs = granule
    bare = _without(refs, summary=True, acdd=True)
    with pytest.raises(OSError):
        granule_extent(_unreadable(bare, tmp_path))  # it does need the source
    lat, lon, start, _ = _photons(src)
    ext = granule_extent(bare)  # the buffered polygon of every track, as before
    assert ext.footprint is not None and ext.space_from[0].endswith("reference_photon_lat")
    assert inside_geometry(ext.footprint.geometry, lon, lat).all()
    assert ext.footprint.geometry["type"] == "Polygon"
    assert len(ext.footprint.geometry["coordinates"][0]) > 5  # not a box
    assert abs(ext.start - start) < dt.timedelta(milliseconds=1)


def test_the_catalog_reads_tracks_only_when_asked(catalog_dir: Path) -> None:
    """The fixture's two collections share a track granule: ``samples`` built with
    ``track_footprints="read"`` (polygons along the tracks), ``samples-json`` by default
    (boxes of the recorded bounds): both hug the same data."""
    import json

    from shapely.geometry import shape

    def tracks(cid: str) -> dict[str, dict]:
        docs = (json.loads(p.read_text()) for p in catalog_dir.glob(f"{cid}/*/*.json"))
        return {d["id"]: d for d in docs if d["id"].startswith("ATL03")}

    read, recorded = tracks("samples"), tracks("samples-json")
    assert recorded and recorded.keys() <= read.keys()
    for name in recorded:
        item = read[name]
        box = shape(recorded[name]["geometry"])
        assert len(item["geometry"]["coordinates"][0]) > 5  # a polygon along the tracks
        assert len(recorded[name]["geometry"]["coordinates"][0]) == 5  # a box
        assert box.intersection(shape(item["geometry"])).area > 0.5 * box.area
        assert recorded[name]["bbox"] == pytest.approx(item["bbox"], abs=0.01)
        assert recorded[name]["properties"]["h5sidecar:footprint_from"] == \
            item["properties"]["h5sidecar:footprint_from"]
