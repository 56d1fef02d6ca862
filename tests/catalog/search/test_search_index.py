"""The STAC API's item database: every search (bbox across the antimeridian, datetime ranges and
instants, ids, collections, intersects) returns what a brute-force filter over the items returns,
cursor pages are complete and stable while items are added, and the gateway keeps answering
chunk requests while a search runs (real uvicorn)."""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import h5py
import httpx
import numpy as np
import pytest

from h5sidecar.catalog import StacApi, search_items
from h5sidecar.catalog._item_db import DB_NAME, connect, item_row, write_row
from h5sidecar.catalog._tree import write_collection, write_root

BASE = "http://gateway.test/stac"
T0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _box(w: float, s: float, e: float, n: float) -> dict:
    parts = [(w, e)] if w <= e else [(w, 180.0), (-180.0, e)]
    polys = [[[[a, s], [b, s], [b, n], [a, n], [a, s]]] for a, b in parts]
    return ({"type": "Polygon", "coordinates": polys[0]} if len(polys) == 1
            else {"type": "MultiPolygon", "coordinates": polys})  # fmt: skip


def _items(n: int, seed: int = 1) -> list[dict]:
    """Random items: boxes anywhere (some across the antimeridian), some without a footprint,
    time ranges or instants, two collections sharing some ids."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        w = rng.uniform(-180, 180)
        e = w + rng.uniform(0.1, 40)
        e = e - 360 if e > 180 else e
        s = rng.uniform(-90, 80)
        box = [round(w, 4), round(s, 4), round(e, 4), round(min(90.0, s + rng.uniform(0.1, 10)), 4)]
        start = T0 + dt.timedelta(hours=rng.uniform(0, 24 * 365))
        props: dict = {"datetime": None, "start_datetime": _iso(start),
                       "end_datetime": _iso(start + dt.timedelta(hours=rng.uniform(0, 240)))}
        if i % 9 == 0:
            props = {"datetime": _iso(start)}
        doc = {"type": "Feature", "stac_version": "1.1.0", "id": f"item-{i % (n // 2 + 1)}",
               "geometry": None if i % 10 == 0 else _box(*box), "properties": props,
               "links": [], "assets": {}, "collection": "c1" if i % 2 else "c2"}
        if doc["geometry"] is not None:
            doc["bbox"] = box
        out.append(doc)
    return out


def _stacdir(folder: Path, items: list[dict]) -> Path:
    """A catalog folder with the item database (as ``h5sidecar catalog`` leaves it)."""
    db = connect(folder / DB_NAME)
    for doc in items:
        write_row(db, item_row({k: v for k, v in doc.items() if k != "collection"},
                               doc["collection"]))  # fmt: skip
    db.commit()
    db.close()
    root = {"type": "Catalog", "id": "r", "stac_version": "1.1.0", "description": "d",
            "links": [], "title": "r"}  # fmt: skip
    for cid in ("c1", "c2"):
        coll = {"type": "Collection", "id": cid, "stac_version": "1.1.0", "description": cid,
                "links": [], "license": "other", "extent": {
                    "spatial": {"bbox": [[-180, -90, 180, 90]]},
                    "temporal": {"interval": [[None, None]]}}}  # fmt: skip
        write_collection(folder, coll, (), "r")
        write_root(folder, cid, cid, root)
    return folder


def _all_pages(api: StacApi, params: dict, limit: int = 7) -> tuple[list[tuple[str, str]], int]:
    """Every item of a search, following ``next`` links, and its ``numberMatched`` (the same on
    every page; -1 when left out)."""
    params = {**params, "limit": limit}
    seen: list[tuple[str, str]] = []
    counts = set()
    for _ in range(10_000):
        page = api.search(params, BASE, method="POST")
        counts.add(page.get("numberMatched", -1))
        seen += [(f["collection"], f["id"]) for f in page["features"]]
        nxt = [lk for lk in page["links"] if lk["rel"] == "next"]
        if not nxt:
            break
        params = nxt[0]["body"]
    assert len(counts) == 1, counts
    return seen, counts.pop()


def _queries(rng: random.Random) -> list[dict]:
    out: list[dict] = [{}]
    for _ in range(60):
        q: dict = {}
        if rng.random() < 0.7:
            w = rng.uniform(-180, 180)
            e = w + rng.uniform(0.5, 90)
            s = rng.uniform(-90, 60)
            q["bbox"] = [w, s, e - 360 if e > 180 else e, min(90.0, s + rng.uniform(1, 40))]
        r = rng.random()
        a = T0 + dt.timedelta(days=rng.uniform(0, 365))
        if r < 0.25:
            q["datetime"] = f"{_iso(a)}/{_iso(a + dt.timedelta(days=rng.uniform(0, 30)))}"
        elif r < 0.4:
            q["datetime"] = f"../{_iso(a)}"
        elif r < 0.55:
            q["datetime"] = f"{_iso(a)}/.."
        elif r < 0.65:
            q["datetime"] = _iso(a)
        if rng.random() < 0.15:
            q["ids"] = [f"item-{rng.randrange(200)}" for _ in range(5)]
        if rng.random() < 0.3:
            q["collections"] = [rng.choice(["c1", "c2"])]
        out.append(q)
    for _ in range(6):
        x, y = rng.uniform(-170, 160), rng.uniform(-80, 70)
        out.append({"intersects": _box(x, y, x + rng.uniform(1, 20), y + rng.uniform(1, 20))})
    out.append({"bbox": [179.5, -90, -179.5, 90]})  # a thin box across the antimeridian
    return out


@pytest.mark.parametrize("kind", ["database", "json-tree"])
def test_search_equals_brute_force(tmp_path: Path, kind: str) -> None:
    items = _items(400)
    if kind == "database":
        api = StacApi(_stacdir(tmp_path, items))
    else:  # a folder without the database (written by hand): loaded into memory once
        api = StacApi(_stacdir(tmp_path, items))
        (tmp_path / DB_NAME).unlink()
        for cid in ("c1", "c2"):
            mine = [d for d in items if d["collection"] == cid]
            for d in mine:
                p = tmp_path / cid / f"{d['id']}.json"
                p.write_text(json.dumps(d))
            coll = json.loads((tmp_path / cid / "collection.json").read_text())
            coll["links"] += [{"rel": "item", "href": f"./{d['id']}.json"} for d in mine]
            (tmp_path / cid / "collection.json").write_text(json.dumps(coll))
        items = [d for cid in ("c1", "c2") for d in items if d["collection"] == cid]
        items = list({(d["collection"], d["id"]): d for d in items}.values())
        api = StacApi(tmp_path)
    rng = random.Random(7)
    nonempty = 0
    for q in _queries(rng):
        want = [(d["collection"], d["id"]) for d in search_items(items, q)]
        got, matched = _all_pages(api, q)
        assert got == want, q
        assert matched == len(want), q
        nonempty += bool(want)
    assert nonempty > 30  # the queries do find things


def test_cursor_pages_are_stable_while_items_are_added(tmp_path: Path) -> None:
    items = _items(120)
    api = StacApi(_stacdir(tmp_path, items))
    params: dict = {"limit": 10, "collections": ["c1"]}
    want = [(d["collection"], d["id"]) for d in search_items(items, params)]
    seen: list[tuple[str, str]] = []
    writer = connect(tmp_path / DB_NAME)
    added = {"type": "Feature", "stac_version": "1.1.0", "id": "late", "geometry": None,
             "properties": {"datetime": "2020-06-01T00:00:00Z"}, "links": [], "assets": {}}
    for n in range(100):
        page = api.search(params, BASE)
        seen += [(f["collection"], f["id"]) for f in page["features"]]
        if n == 1:  # a catalog run adds an item while a client pages
            write_row(writer, item_row(added, "c1"))
            writer.commit()
        nxt = [lk for lk in page["links"] if lk["rel"] == "next"]
        if not nxt:
            break
        params = dict(parse_qsl(urlsplit(nxt[0]["href"]).query))
        assert params["token"].startswith("next:")
    writer.close()
    assert seen == [*want, ("c1", "late")]
    with pytest.raises(Exception, match="next"):
        api.search({"token": "page:3"}, BASE)


def test_item_by_key(tmp_path: Path) -> None:
    items = _items(50)
    api = StacApi(_stacdir(tmp_path, items))
    first = next(d for d in items if d["collection"] == "c1" and d["id"] == "item-1")
    got = api.item("c1", "item-1", BASE)
    assert got["properties"] == first["properties"] and got["collection"] == "c1"


def test_a_slow_search_does_not_hold_chunk_requests(tmp_path: Path) -> None:
    """A search blocked in the API (as a long one over a big catalog is) while a chunk request
    comes: the chunk is answered at once, with h5py's values, before the search returns."""
    from h5sidecar.gateway.app import create_app
    from h5sidecar.settings import GatewaySettings
    from h5sidecar.workflows import index_many
    from tests.gateway._http import running

    src = tmp_path / "src"
    src.mkdir()
    with h5py.File(src / "g.h5", "w") as f:
        f.create_dataset("v", data=np.arange(100, dtype="<i4"), chunks=(10,))
    assert index_many(str(src), str(tmp_path / "dest"), executor="serial").ok
    chunk_done = threading.Event()

    class SlowApi(StacApi):
        def search(self, *args: object, **kwargs: object) -> dict:  # type: ignore[override]
            chunk_done.wait(timeout=5)  # blocks whoever runs it: the loop, or a worker thread
            return super().search(*args, **kwargs)  # type: ignore[arg-type]

    (tmp_path / "stac").mkdir()
    api = SlowApi(_stacdir(tmp_path / "stac", _items(20)))
    app = create_app(GatewaySettings(), str(tmp_path / "dest"), stac_api=api)
    with running(app) as url:
        result: dict = {}

        def search() -> None:
            result["response"] = httpx.get(f"{url}/stac/search?limit=3", timeout=30)
            result["at"] = time.monotonic()

        thread = threading.Thread(target=search)
        thread.start()
        time.sleep(0.3)  # the search is in the API
        r = httpx.get(f"{url}/zarr/g.h5/v/2", timeout=30)
        chunk_done.set()
        answered = time.monotonic()
        thread.join(timeout=30)
    assert r.status_code == 200
    with h5py.File(src / "g.h5") as f:
        np.testing.assert_array_equal(np.frombuffer(r.content, "<i4"), f["v"][20:30])
    assert answered < result["at"]  # the chunk came back while the search was still running
    assert result["response"].status_code == 200
    assert result["response"].json()["numberReturned"] == 3


@pytest.mark.parametrize("count_limit", [5, 60])
def test_broad_searches_page_everything_without_a_count(tmp_path: Path, count_limit: int) -> None:
    """A search with more candidates than ``count_limit`` leaves ``numberMatched`` out and
    pages in key order (without reading every match): its pages still hold exactly the
    brute-force matches, in the same order; a narrower one is counted exactly."""
    items = _items(400)
    api = StacApi(_stacdir(tmp_path, items), count_limit=count_limit)
    rng = random.Random(11)
    uncounted = counted = 0
    for q in _queries(rng):
        for limit in (1, 7):
            want = [(d["collection"], d["id"]) for d in search_items(items, q)]
            got, matched = _all_pages(api, q, limit=limit)
            assert got == want, q
            if matched == -1:
                uncounted += 1
            else:
                assert matched == len(want) <= count_limit, q
                counted += 1
    assert uncounted > 10 and counted > 10  # both kinds were searched
    # the legacy offset tokens skip matches in a broad search too
    page = api.search({"token": "offset:3", "limit": 2}, BASE)
    assert [f["id"] for f in page["features"]] == [d["id"] for d in items[3:5]]
    assert "numberMatched" not in page
