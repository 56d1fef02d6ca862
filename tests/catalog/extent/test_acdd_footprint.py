"""Granules whose coordinates give no footprint (projected x/y only) take their ACDD
``geospatial_*`` bounds, so bbox searches find them; a granule with neither is reported with the
reason, never left silently unsearchable (issue 24, item 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pytest

from h5sidecar.catalog import CatalogResult, NoFootprint, StacApi, build_catalog, search_items
from h5sidecar.catalog.extent._geometry import acdd_footprint
from h5sidecar.cli import main

#: ATL14-like: a polar-stereographic grid (x/y in metres) over Greenland, bounds in ACDD.
GREENLAND = {"geospatial_lon_min": -75.0, "geospatial_lat_min": 58.0,
             "geospatial_lon_max": -10.0, "geospatial_lat_max": 84.0}  # fmt: skip
#: Bounds written as text, as some products write them.
TEXT_BOUNDS = {"geospatial_lon_min": "-20", "geospatial_lat_min": "40",
               "geospatial_lon_max": "10.5", "geospatial_lat_max": "50"}  # fmt: skip
TIME = {"time_coverage_start": "2019-03-31T00:00:00Z", "time_coverage_end": "2022-03-31T00:00:00Z"}


def _projected(path: Path, attrs: dict[str, Any]) -> Path:
    """A gridded granule with projected coordinates only (no latitude/longitude variables)."""
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(-6.5e5, 9.0e5, 1.0e5)
        f["y"] = np.arange(-3.4e6, -6.0e5, 1.0e5)
        f["x"].attrs["standard_name"] = "projection_x_coordinate"
        f["y"].attrs["standard_name"] = "projection_y_coordinate"
        f["x"].make_scale("x")
        f["y"].make_scale("y")
        h = f.create_dataset("h", data=np.zeros((f["y"].size, f["x"].size), "f4"))
        h.dims[0].attach_scale(f["y"])
        h.dims[1].attach_scale(f["x"])
        for k, v in {**TIME, **attrs}.items():
            f.attrs[k] = v
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[CatalogResult, Path]:
    from h5sidecar.workflows import index_many

    root = tmp_path_factory.mktemp("acdd")
    src = root / "src"
    src.mkdir()
    _projected(src / "ATL14_GL_like.h5", GREENLAND)
    _projected(src / "text_bounds.h5", TEXT_BOUNDS)
    _projected(src / "nowhere.h5", {})
    assert index_many(str(src), str(root / "dest"), executor="serial").ok
    return build_catalog(str(root / "dest"), root / "stac", collection_id="acdd"), root / "stac"


def _items(stac: Path) -> dict[str, dict[str, Any]]:
    docs = (json.loads(p.read_text()) for p in stac.glob("acdd/*/*.json"))
    return {d["id"]: d for d in docs}


def test_acdd_bounds_give_the_footprint(built: tuple[CatalogResult, Path]) -> None:
    res, stac = built
    items = _items(stac)
    gl = items["ATL14_GL_like"]
    assert gl["bbox"] == [-75.0, 58.0, -10.0, 84.0]
    assert gl["geometry"]["type"] == "Polygon"
    ring = np.array(gl["geometry"]["coordinates"][0])
    assert (ring.min(axis=0).tolist(), ring.max(axis=0).tolist()) == ([-75, 58], [-10, 84])
    assert gl["properties"]["h5sidecar:footprint_from"] == ["attributes"]
    assert "h5sidecar:no_footprint" not in gl["properties"]
    assert items["text_bounds"]["bbox"] == [-20.0, 40.0, 10.5, 50.0]
    # the collection extent is the union of the footprints, not the whole globe
    collection = json.loads(Path(res.collection).read_text())
    assert collection["extent"]["spatial"]["bbox"] == [[-75.0, 40.0, 10.5, 84.0]]


def test_bbox_searches_find_them(built: tuple[CatalogResult, Path]) -> None:
    from h5sidecar.gateway.app import create_app
    from h5sidecar.settings import GatewaySettings
    from tests.gateway._http import running

    _, stac = built
    inland = {"bbox": "-45,70,-40,72"}
    assert [i["id"] for i in search_items(list(_items(stac).values()), inland)] == [
        "ATL14_GL_like"]
    page = StacApi(stac).search(inland, "http://gateway.test/stac")
    assert [f["id"] for f in page["features"]] == ["ATL14_GL_like"]
    app = create_app(GatewaySettings(), str(stac.parent / "dest"), stac_api=StacApi(stac))
    with running(app) as url:
        got = httpx.get(f"{url}/stac/search", params=inland, timeout=30).json()
        assert [f["id"] for f in got["features"]] == ["ATL14_GL_like"]
        both = httpx.post(f"{url}/stac/search", json={"bbox": [-30, 45, 0, 70]}, timeout=30)
        assert sorted(f["id"] for f in both.json()["features"]) == ["ATL14_GL_like",
                                                                   "text_bounds"]


def test_a_granule_without_footprint_is_reported(built: tuple[CatalogResult, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    res, stac = built
    assert res.ok  # catalogued (it has a time range), but said to be unsearchable by place
    [note] = res.no_footprint
    assert isinstance(note, NoFootprint) and note.name == "nowhere.h5"
    assert "no latitude/longitude variables" in note.reason
    assert "no geospatial_lon_min attribute" in note.reason
    item = _items(stac)["nowhere"]
    assert item["geometry"] is None and "bbox" not in item
    assert item["properties"]["h5sidecar:no_footprint"] == note.reason
    assert res.to_dict()["no_footprint"] == [{"name": "nowhere.h5", "reason": note.reason}]
    capsys.readouterr()
    assert main(["catalog", str(stac.parent / "dest"), "-o", str(stac.parent / "stac2")]) == 0
    printed = capsys.readouterr().out
    assert "NO FOOTPRINT" in printed and "nowhere.h5" in printed
    assert "ATL14_GL_like" not in printed


@pytest.mark.parametrize(
    ("bounds", "bbox", "kind"),
    [
        ((170, 10, -170, 20), [170, 10, -170, 20], "MultiPolygon"),  # across the antimeridian
        ((190, 10, 200, 20), [-170, 10, -160, 20], "Polygon"),  # 0..360 longitudes
        ((0, -90, 360, -60), [-180, -90, 180, -60], "Polygon"),  # all longitudes
        ((100, 10, 180, 20), [100, 10, 180, 20], "Polygon"),  # east edge on the antimeridian
    ],
)
def test_acdd_box_shapes(bounds: tuple[float, ...], bbox: list[float], kind: str) -> None:
    attrs = dict(zip(("geospatial_lon_min", "geospatial_lat_min", "geospatial_lon_max",
                      "geospatial_lat_max"), bounds, strict=True))  # fmt: skip
    fp = acdd_footprint(attrs)
    assert fp.bbox == [float(b) for b in bbox] and fp.geometry["type"] == kind


@pytest.mark.parametrize(
    ("attrs", "why"),
    [
        ({**GREENLAND, "geospatial_lat_min": "north"}, "is not a number"),
        ({**GREENLAND, "geospatial_lat_min": 85.0}, "not a range"),
        ({**GREENLAND, "geospatial_lon_max": float("nan")}, "not finite"),
        ({k: v for k, v in GREENLAND.items() if k != "geospatial_lat_max"}, "no geospatial_lat"),
    ],
)
def test_unusable_acdd_bounds_say_why(attrs: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        acdd_footprint(attrs)
