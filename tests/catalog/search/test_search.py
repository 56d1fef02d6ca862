"""The framework-free STAC API core: item search (bbox, datetime, ids, collections, limit,
paging) over the catalog, and its refusals of malformed parameters."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from h5sidecar.catalog import StacApi, search_items
from h5sidecar.errors import InvalidRequestError, NotIndexedError

#: one xdist worker for the session's sample granules and catalog (where grouping works)
pytestmark = pytest.mark.xdist_group("catalog")

BASE = "http://gateway.test/stac"


@pytest.fixture(scope="module")
def api(catalog_dir: Path) -> StacApi:
    return StacApi(catalog_dir)


def _ids(page: dict) -> list[str]:
    return [f["id"] for f in page["features"]]


def _all_items(catalog_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in catalog_dir.glob("*/*/*.json")]


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def test_bbox_search_matches_item_boxes(api: StacApi, catalog_dir: Path) -> None:
    items = [i for i in _all_items(catalog_dir) if i["collection"] == "samples"]
    track = next(i for i in items if i["id"].startswith("ATL03"))
    w, s, _, _ = track["bbox"]
    inside = f"{w + 0.01},{s + 0.01},{w + 0.02},{s + 0.02}"
    page = api.search({"bbox": inside, "collections": "samples"}, BASE)
    # the track's granule and the global grid both cover that little box; the other track not
    assert sorted(_ids(page)) == sorted([track["id"], "gridded_sample"])
    far = f"{(w + 180) % 360 - 180 + 1},{-s - 1},{(w + 180) % 360 - 180 + 2},{-s}"
    assert _ids(api.search({"bbox": far, "collections": ["samples"]}, BASE)) == ["gridded_sample"]


def test_intersects_matches_footprints_not_boxes(api: StacApi, catalog_dir: Path) -> None:
    from shapely.geometry import Point, box, shape

    items = [i for i in _all_items(catalog_dir) if i["collection"] == "samples"]
    track = next(i for i in items if i["id"].startswith("ATL03"))
    foot = shape(track["geometry"])
    # a point on the footprint: the track and the global grid
    on = foot.representative_point()
    page = api.search({"intersects": {"type": "Point", "coordinates": [on.x, on.y]},
                       "collections": "samples"}, BASE, method="POST")
    assert sorted(_ids(page)) == sorted([track["id"], "gridded_sample"])
    # inside the track's bbox but off its (thin, slanted) footprint: bbox says yes, intersects no
    w, s, e, n = track["bbox"]
    off = next(Point(x, y) for x, y in ((w, s), (w, n), (e, s), (e, n))
               if not foot.intersects(Point(x, y).buffer(1e-3)))
    probe = Point(off.x + (1e-3 if off.x == w else -1e-3), off.y + (1e-3 if off.y == s else -1e-3))
    assert box(w, s, e, n).contains(probe) and not foot.intersects(probe)
    as_text = json.dumps({"type": "Point", "coordinates": [probe.x, probe.y]})
    page = api.search({"intersects": as_text, "collections": "samples"}, BASE)  # GET form
    assert _ids(page) == ["gridded_sample"]
    tiny = f"{probe.x - 1e-6},{probe.y - 1e-6},{probe.x + 1e-6},{probe.y + 1e-6}"
    assert track["id"] in _ids(api.search({"bbox": tiny, "collections": "samples"}, BASE))
    # a polygon over the whole footprint, and every item's own geometry, find that item
    page = api.search({"intersects": {"type": "Polygon", "coordinates": [[
        [w, s], [e, s], [e, n], [w, n], [w, s]]]}, "collections": "samples"}, BASE)
    assert track["id"] in _ids(page)
    for item in items:
        hit = search_items(items, {"intersects": item["geometry"]})
        assert item["id"] in [h["id"] for h in hit]


def test_datetime_ids_and_collections(api: StacApi, catalog_dir: Path) -> None:
    items = sorted((i for i in _all_items(catalog_dir) if i["collection"] == "samples"),
                   key=lambda i: i["properties"]["start_datetime"])
    first = items[0]
    start, end = first["properties"]["start_datetime"], first["properties"]["end_datetime"]
    page = api.search({"datetime": f"{start}/{end}", "collections": "samples"}, BASE)
    assert _ids(page) == [first["id"]]
    page = api.search({"datetime": f"../{start}", "collections": "samples"}, BASE)
    assert _ids(page) == [first["id"]]
    later = _time(end) + dt.timedelta(seconds=1)
    page = api.search({"datetime": f"{later.isoformat()}/..", "collections": "samples"}, BASE)
    assert first["id"] not in _ids(page) and len(_ids(page)) == len(items) - 1
    page = api.search({"ids": [first["id"]]}, BASE)  # in both collections
    assert _ids(page) == [first["id"], first["id"]]
    assert {f["collection"] for f in page["features"]} == {"samples", "samples-json"}
    assert search_items(items, {"ids": first["id"]}) == [first]


def test_paging_with_next_links(api: StacApi) -> None:
    seen: list[str] = []
    params: dict = {"limit": "1"}
    for _ in range(10):
        page = api.search(params, BASE)
        assert page["numberReturned"] == 1 and page["numberMatched"] == 4
        seen += _ids(page)
        nxt = [link for link in page["links"] if link["rel"] == "next"]
        if not nxt:
            break
        from urllib.parse import parse_qsl, urlsplit

        params = dict(parse_qsl(urlsplit(nxt[0]["href"]).query))
    assert len(seen) == 4 and len(set(zip(seen, range(4), strict=True))) == 4
    body = api.search({"limit": 3}, BASE, method="POST")
    [nxt] = [link for link in body["links"] if link["rel"] == "next"]
    assert nxt["method"] == "POST" and nxt["body"] == {"limit": 3, "token": "next:3"}
    assert api.search(nxt["body"], BASE, method="POST")["numberReturned"] == 1


def test_documents_have_absolute_links(api: StacApi) -> None:
    landing = api.landing(BASE)
    assert "https://api.stacspec.org/v1.0.0/item-search" in landing["conformsTo"]
    rels = {(link["rel"], link.get("method")) for link in landing["links"]}
    assert {("search", "GET"), ("search", "POST"), ("conformance", None)} <= rels
    item = api.item("samples", "gridded_sample", BASE)
    assert {link["rel"]: link["href"] for link in item["links"]}["self"] == (
        f"{BASE}/collections/samples/items/gridded_sample")
    assert api.collection("samples", BASE)["extent"]["spatial"]["bbox"]
    assert len(api.list_collections(BASE)["collections"]) == 2
    assert json.loads(api.static_file("samples/collection.json"))["id"] == "samples"


@pytest.mark.parametrize(("params", "match"), [
    ({"bbox": "1,2,3"}, "4 \\(or 6\\) numbers"),
    ({"bbox": "a,b,c,d"}, "not numbers"),
    ({"bbox": "0,10,1,5"}, "out of range"),
    ({"datetime": "yesterday"}, "RFC 3339"),
    ({"datetime": "2020-01-02T00:00:00Z/2020-01-01T00:00:00Z"}, "ends before"),
    ({"limit": "0"}, "within 1..10000"),
    ({"limit": "ten"}, "integer"),
    ({"token": "page:2"}, "next"),
    ({"filter": "x > 1"}, "not supported"),
    ({"intersects": {"type": "Point", "coordinates": [0, 0]}, "bbox": "0,0,1,1"}, "not both"),
    ({"intersects": {"type": "Feature", "geometry": None}}, "GeoJSON geometry object"),
    ({"intersects": "{not json"}, "not GeoJSON text"),
    ({"intersects": {"type": "Polygon", "coordinates": [[[0, 0], [1, 1], [1, 0], [0, 1],
                                                          [0, 0]]]}}, "not a valid geometry"),
    ({"intersects": {"type": "Point", "coordinates": [200, 0]}}, "antimeridian"),
    ({"intersects": {"type": "Polygon", "coordinates": [[[0, 0], [1]]]}}, "not a valid Polygon"),
    ({"ids": 5}, "list of strings"),
])
def test_malformed_parameters_are_refused(api: StacApi, params: dict, match: str) -> None:
    with pytest.raises(InvalidRequestError, match=match):
        api.search(params, BASE)


def test_unknown_collection_item_and_file(api: StacApi, tmp_path: Path) -> None:
    with pytest.raises(NotIndexedError, match="collections: samples"):
        api.collection("nope", BASE)
    with pytest.raises(NotIndexedError):
        api.item("samples", "nope", BASE)
    for rel in ("../../etc/passwd", "samples/../../x.json", "catalog.txt"):
        with pytest.raises(NotIndexedError):
            api.static_file(rel)
    with pytest.raises(NotIndexedError, match="h5sidecar catalog"):
        StacApi(tmp_path)
