"""The catalog in pgstac: ``h5sidecar catalog --pgstac DSN`` loads it into a real PostgreSQL +
PostGIS with pgstac's schema, and :class:`PgStacApi` (``serve --stac-backend pgstac:DSN``)
answers every search with the items and documents the embedded :class:`StacApi` answers, items
without a footprint included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from h5sidecar.catalog import PgStacApi, StacApi, build_catalog, load_pgstac
from h5sidecar.catalog.pgstac._pgstac_api import backend_dsn
from h5sidecar.cli import main
from h5sidecar.errors import InvalidRequestError, NotIndexedError, SourceReadError
from h5sidecar.gateway.app import create_app
from h5sidecar.settings import GatewaySettings
from tests.catalog._pgstac_server import missing, pgstac_cluster
from tests.catalog.conftest import Indexed
from tests.catalog.extent.test_acdd_footprint import _projected
from tests.conftest import free_port
from tests.gateway._http import running, wait_healthy

#: one xdist worker for the session's sample granules and catalog (where grouping works)
pytestmark = pytest.mark.xdist_group("catalog")

BASE = "http://gateway.test/stac"
#: ACDD-bounded granules: one across the antimeridian, one over Greenland, one with no footprint
ACDD = {
    "crossing": {"geospatial_lon_min": 170.0, "geospatial_lat_min": 10.0,
                 "geospatial_lon_max": -170.0, "geospatial_lat_max": 20.0,
                 "time_coverage_start": "2021-01-01T00:00:00Z",
                 "time_coverage_end": "2021-01-02T00:00:00Z"},
    "greenland": {"geospatial_lon_min": -75.0, "geospatial_lat_min": 58.0,
                  "geospatial_lon_max": -10.0, "geospatial_lat_max": 84.0,
                  "time_coverage_start": "2018-06-01T00:00:00Z",
                  "time_coverage_end": "2018-07-01T00:00:00Z"},
    "nowhere": {"time_coverage_start": "2021-01-01T06:00:00Z",
                "time_coverage_end": "2021-01-01T07:00:00Z"},
}  # fmt: skip


@pytest.fixture(scope="session")
def pgstac_dsn() -> Iterator[str]:
    """A throwaway PostgreSQL + PostGIS + pgstac on 127.0.0.1 for the session."""
    why = missing()
    if why is not None:
        pytest.skip(why)
    with pgstac_cluster() as dsn:
        yield dsn


@dataclass(frozen=True)
class Loaded:
    stac: Path
    dest: Path  # the ACDD granules' DEST
    dsn: str


@pytest.fixture(scope="module")
def loaded(indexed: Indexed, pgstac_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    """Two collections (the sample granules; the ACDD ones) in a folder, loaded by the CLI."""
    from h5sidecar.workflows import index_many

    root = tmp_path_factory.mktemp("pgstac")
    src = root / "src"
    src.mkdir()
    for name, attrs in ACDD.items():
        _projected(src / f"{name}.h5", attrs)
    dest = root / "dest"
    assert index_many(str(src), str(dest), executor="serial").ok
    stac = root / "stac"
    assert build_catalog(str(indexed.dest_parquet), stac, collection_id="samples",
                         gateway_url="http://127.0.0.1:9/").ok  # fmt: skip
    assert main(["catalog", str(dest), "-o", str(stac), "--collection-id", "acdd",
                 "--pgstac", pgstac_dsn]) == 0  # fmt: skip
    load_pgstac(pgstac_dsn, stac, collections=["samples"])
    return Loaded(stac, dest, pgstac_dsn)


@pytest.fixture(scope="module")
def apis(loaded: Loaded) -> Iterator[tuple[StacApi, PgStacApi]]:
    pg = PgStacApi(loaded.dsn)
    yield StacApi(loaded.stac), pg
    pg.close()


def _every_page(api: Any, params: dict[str, Any], method: str = "GET",
                collection: str | None = None) -> tuple[list[dict[str, Any]], list[int]]:
    """Every feature of a search, following ``next`` links; and each page's numberMatched."""
    features, matched = [], []
    while True:
        page = api.search(params, BASE, method=method, collection=collection)
        features += page["features"]
        matched.append(page.get("numberMatched"))
        assert page["numberReturned"] == len(page["features"])
        nxt = [link for link in page["links"] if link["rel"] == "next"]
        if not nxt:
            return features, matched
        assert len(page["features"]) == int(params.get("limit", 10))
        if method == "POST":
            params = nxt[0]["body"]
        else:
            from urllib.parse import parse_qsl, urlsplit

            params = dict(parse_qsl(urlsplit(nxt[0]["href"]).query))


def _by_id(features: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {f["id"]: f for f in features}
    assert len(out) == len(features), "an item came twice"
    return out


def _sorted(doc: dict[str, Any], key: str) -> dict[str, Any]:
    return {**doc, key: sorted(doc[key], key=lambda d: json.dumps(d, sort_keys=True))}


def _items(stac: Path) -> dict[str, dict[str, Any]]:
    return {d["id"]: d for d in (json.loads(p.read_text()) for p in stac.glob("*/*/*.json"))}


def _queries(stac: Path) -> list[dict[str, Any]]:
    track = next(d for d in _items(stac).values() if d["id"].startswith("ATL03"))
    w, s, _, _ = track["bbox"]
    start, end = track["properties"]["start_datetime"], track["properties"]["end_datetime"]
    return [
        {},
        {"bbox": f"{w + 0.01},{s + 0.01},{w + 0.02},{s + 0.02}"},  # one track and the grid
        {"bbox": "175,12,-175,13"},  # across the antimeridian
        {"bbox": "175,12,179,13"},  # west of it: the crossing granule's west half
        {"bbox": "-179,12,-175,13"},  # east of it
        {"bbox": "-60,60,-30,70", "collections": "acdd"},
        {"bbox": "0,-60,10,-50", "collections": "acdd"},  # nothing
        {"datetime": "2021-01-01T12:00:00Z"},  # an instant
        {"datetime": f"{start}/{end}"},  # closed
        {"datetime": "../2019-01-01T00:00:00Z"},  # open start
        {"datetime": "2020-06-01T00:00:00Z/.."},  # open end
        {"ids": f"crossing,greenland,nowhere,{track['id']}"},
        {"collections": "samples"},
        {"collections": "acdd,samples", "datetime": "2018-01-01T00:00:00Z/2021-12-31T00:00:00Z"},
        {"intersects": {"type": "Point", "coordinates": [-40.0, 70.0]}},
    ]


def test_load_names_items_without_geometry_and_reloads_idempotently(loaded: Loaded) -> None:
    import psycopg

    def count() -> int:
        with psycopg.connect(loaded.dsn) as conn:
            return int(conn.execute("SELECT count(*) FROM pgstac.items").fetchone()[0])  # type: ignore[index]

    before = count()
    assert before == len(_items(loaded.stac))  # "nowhere" (no footprint) too
    again = load_pgstac(loaded.dsn, loaded.stac, batch=2)  # batches smaller than a collection
    assert again.collections == ("samples", "acdd")
    assert [n.name for n in again.no_footprint] == ["nowhere.h5"]
    assert again.no_footprint[0].reason == _items(loaded.stac)["nowhere"]["properties"][
        "h5sidecar:no_footprint"] != ""  # fmt: skip
    assert again.items == before
    assert count() == before
    with pytest.raises(NotIndexedError, match="no collection"):
        load_pgstac(loaded.dsn, loaded.stac, collections=["missing"])


def test_the_cli_names_the_items_without_footprint(loaded: Loaded, capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:  # fmt: skip
    assert main(["catalog", str(loaded.dest), "-o", str(tmp_path / "stac"), "--collection-id",
                 "acdd", "--pgstac", loaded.dsn]) == 0  # fmt: skip
    out = capsys.readouterr()
    assert "NO FOOTPRINT nowhere.h5" in out.out and "in pgstac with an empty geometry" in out.out
    assert "upserted 3 item(s) of acdd into pgstac, 1 of them without a footprint" in out.err


def test_an_item_without_footprint_is_found_but_by_place(apis: tuple[StacApi, PgStacApi]) -> None:
    """pgstac's geometry is NOT NULL: the item without a footprint is held with an empty one,
    found by datetime, ids and collections, never by bbox or intersects, and answered as STAC
    has it (``geometry: null``), as the embedded backend answers it."""
    emb, pg = apis
    want = emb.item("acdd", "nowhere", BASE)
    assert want["geometry"] is None
    assert pg.item("acdd", "nowhere", BASE) == want
    for found in ({"ids": "nowhere"}, {"datetime": "2021-01-01T06:30:00Z"},
                  {"collections": "acdd", "datetime": "2021-01-01T05:00:00Z/.."}):  # fmt: skip
        page = pg.search(found, BASE)
        assert [f["id"] for f in page["features"] if f["id"] == "nowhere"] == ["nowhere"], found
        assert next(f for f in page["features"] if f["id"] == "nowhere") == want
    world = {"type": "Polygon", "coordinates": [[[-180, -90], [180, -90], [180, 90], [-180, 90],
                                                 [-180, -90]]]}  # fmt: skip
    for where, expected in (({"bbox": "-180,-90,180,90"}, {"greenland"}),
                            ({"intersects": world}, {"greenland"}),
                            ({"bbox": "175,-90,-175,90"}, set())):  # across the antimeridian
        got = {f["id"] for f in _every_page(pg, {**where, "ids": "nowhere,greenland"})[0]}
        assert got == expected, where


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_searches_find_what_the_embedded_backend_finds(
    apis: tuple[StacApi, PgStacApi], loaded: Loaded, method: str
) -> None:
    emb, pg = apis
    for query in _queries(loaded.stac):
        for limit in (1, 2, 10):
            params = {**query, "limit": limit}
            if method == "GET" and "intersects" in params:
                params["intersects"] = json.dumps(params["intersects"])
            want, want_matched = _every_page(emb, dict(params), method)
            got, got_matched = _every_page(pg, dict(params), method)
            assert _by_id(got) == _by_id(want), query  # equal documents, links included
            assert set(got_matched) == {len(want)}, query
            assert set(want_matched) == {len(want)}, query


def test_collection_routes_and_items_match(apis: tuple[StacApi, PgStacApi],
                                           loaded: Loaded) -> None:  # fmt: skip
    emb, pg = apis
    # the same documents; collections in id order from pgstac, in the folder's order embedded
    assert _sorted(pg.landing(BASE), "links") == _sorted(emb.landing(BASE), "links")
    assert pg.conformance() == emb.conformance()
    assert (_sorted(pg.list_collections(BASE), "collections")
            == _sorted(emb.list_collections(BASE), "collections"))  # fmt: skip
    for cid in ("samples", "acdd"):
        assert pg.collection(cid, BASE) == emb.collection(cid, BASE)
        got, _ = _every_page(pg, {"limit": 1}, collection=cid)
        want, _ = _every_page(emb, {"limit": 1}, collection=cid)
        assert _by_id(got) == _by_id(want)
    for iid, doc in _items(loaded.stac).items():
        assert pg.item(doc["collection"], iid, BASE) == emb.item(doc["collection"], iid, BASE)
    with pytest.raises(NotIndexedError, match="no item 'elsewhere'"):
        pg.item("acdd", "elsewhere", BASE)
    with pytest.raises(NotIndexedError, match=r"no collection 'missing'.*acdd, samples"):
        pg.search({}, BASE, collection="missing")
    for token in ("offset:3", "next:zz", "prev:00:00", "next:73616d706c6573:00"):
        with pytest.raises(InvalidRequestError, match="token"):
            pg.search({"token": token}, BASE)
    with pytest.raises(InvalidRequestError, match="bbox"):
        pg.search({"bbox": "1,2,3"}, BASE)
    with pytest.raises(NotIndexedError, match="pgstac"):
        pg.static_file("catalog.json")


def test_a_load_refreshes_the_counts_pgstac_keeps(pgstac_dsn: str, loaded: Loaded,
                                                  tmp_path: Path) -> None:  # fmt: skip
    """pgstac keeps a search's count for a day: numberMatched must still count a new load."""
    pg = PgStacApi(pgstac_dsn)
    try:
        query = {"datetime": "2021-01-01T00:00:00Z/2021-01-03T00:00:00Z"}
        # "crossing" and "nowhere" (and pgstac keeps the count)
        assert pg.search(query, BASE)["numberMatched"] == 2
        moved = tmp_path / "stac"
        build_catalog(str(loaded.dest), moved, collection_id="acdd-copy")
        load_pgstac(pgstac_dsn, moved)
        assert pg.search(query, BASE)["numberMatched"] == 4
    finally:
        pg.close()
        import psycopg

        with psycopg.connect(pgstac_dsn) as conn:
            conn.execute("SELECT pgstac.delete_collection('acdd-copy')")


def test_connections_the_server_dropped_are_replaced(loaded: Loaded) -> None:
    """A database restart or an idle timeout ends the pool's connections: the next query gets
    a new one instead of failing."""
    import psycopg

    pg = PgStacApi(loaded.dsn, pool_size=2)
    try:
        assert pg.item("acdd", "greenland", BASE)["id"] == "greenland"
        with psycopg.connect(loaded.dsn, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM "
                "pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'").fetchone()
        assert ended is not None and ended[0] >= 1
        assert pg.item("acdd", "greenland", BASE)["id"] == "greenland"
    finally:
        pg.close()


def test_unreachable_database_and_bad_option_say_what(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    with pytest.raises(SourceReadError, match=f"127.0.0.1:{port}/x.*pypgstac migrate"):
        PgStacApi(f"postgresql://u:secret@127.0.0.1:{port}/x", timeout=2)
    with pytest.raises(InvalidRequestError, match="pgstac:DSN"):
        backend_dsn("sqlite:foo")
    assert backend_dsn("pgstac:host=127.0.0.1 dbname=x") == "host=127.0.0.1 dbname=x"


def test_serve_refuses_a_wrong_or_doubled_backend(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:  # fmt: skip
    from h5sidecar.cli import EXIT_USAGE

    args = ["serve", str(tmp_path), "--port", str(free_port())]
    assert main([*args, "--stac-backend", "sqlite:x.db"]) == EXIT_USAGE
    assert "give pgstac:DSN" in capsys.readouterr().err
    assert main([*args, "--stac", str(tmp_path), "--stac-backend", "pgstac:x"]) == EXIT_USAGE
    assert "not both" in capsys.readouterr().err


def test_http_search_through_serve_equals_the_embedded_backend(
    loaded: Loaded, indexed: Indexed, tmp_path: Path
) -> None:
    """``serve --stac-backend pgstac:DSN`` (the command, under uvicorn) against the embedded
    backend's gateway, over real HTTP: every page of GET and POST searches."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "h5sidecar.cli", "serve", str(indexed.dest_parquet),
             "--port", str(port), "--stac-backend", f"pgstac:{loaded.dsn}"],
            env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_healthy(proc, url, log)
            emb_port = free_port()
            app = create_app(GatewaySettings(), str(indexed.dest_parquet),
                             stac_api=StacApi(loaded.stac))  # fmt: skip
            with running(app, emb_port):
                emb_url = f"http://127.0.0.1:{emb_port}"
                for query in _queries(loaded.stac):
                    got = _http_pages(url, {**query, "limit": 2})
                    want = _http_pages(emb_url, {**query, "limit": 2})
                    assert sorted(got) == sorted(want), query
                    for k in got:  # equal documents, modulo the host in the links
                        assert got[k] == json.loads(json.dumps(want[k]).replace(emb_url, url))
                r = httpx.get(f"{url}/stac/collections/acdd/items/greenland", timeout=30)
                assert r.status_code == 200 and r.json()["id"] == "greenland"
                r = httpx.get(f"{url}/stac/collections/acdd/items/nowhere", timeout=30)
                assert r.status_code == 200 and r.json()["geometry"] is None
                r = httpx.get(f"{url}/stac/collections/acdd/items/elsewhere", timeout=30)
                assert r.status_code == 404
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    assert code in (0, -signal.SIGTERM), log.read_text()


def test_a_waiting_query_does_not_stall_the_gateway(loaded: Loaded, indexed: Indexed) -> None:
    """pgstac's queries run in worker threads: while one waits on the database (here on a lock
    another session holds), the gateway still answers other requests at once."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import psycopg

    pg = PgStacApi(loaded.dsn)
    app = create_app(GatewaySettings(), str(indexed.dest_parquet), stac_api=pg)
    try:
        with running(app) as url, psycopg.connect(loaded.dsn) as locker, \
                ThreadPoolExecutor(1) as pool:  # fmt: skip
            locker.execute("LOCK TABLE pgstac.collections IN ACCESS EXCLUSIVE MODE")
            waiting = pool.submit(httpx.get, f"{url}/stac/collections", timeout=60)
            time.sleep(0.5)  # the query has reached the lock
            t0 = time.monotonic()
            assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
            assert time.monotonic() - t0 < 5
            assert not waiting.done()
            locker.rollback()  # the lock goes; the waiting query completes
            r = waiting.result(timeout=30)
            assert r.status_code == 200
            assert sorted(c["id"] for c in r.json()["collections"]) == ["acdd", "samples"]
    finally:
        pg.close()


def _http_pages(url: str, body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every feature of a POST search over HTTP, following ``next`` links."""
    out: dict[str, dict[str, Any]] = {}
    req: dict[str, Any] | None = body
    while req is not None:
        r = httpx.post(f"{url}/stac/search", json=req, timeout=30)
        assert r.status_code == 200, r.text
        page = r.json()
        for f in page["features"]:
            assert f["id"] not in out
            out[f["id"]] = f
        req = next((link["body"] for link in page["links"] if link["rel"] == "next"), None)
    return out


def test_a_collection_without_json_tree_loads_from_the_item_database(
    loaded: Loaded, tmp_path: Path
) -> None:
    """A collection too large for the JSON tree (here asked with ``json_tree=False``) has no
    item files: its items load from the item database, and searches without a bbox find the
    same items in both backends (the one without a footprint too, named by the load)."""
    import psycopg

    stac = tmp_path / "stac"
    assert build_catalog(str(loaded.dest), stac, collection_id="acdd-notree", json_tree=False).ok
    assert not list(stac.glob("acdd-notree/*/*.json"))  # no item files
    res = load_pgstac(loaded.dsn, stac)
    try:
        assert [n.name for n in res.no_footprint] == ["nowhere.h5"] and res.items == len(ACDD)
        emb, pg = StacApi(stac), PgStacApi(loaded.dsn)
        try:
            for query in ({}, {"ids": "crossing,greenland,nowhere"},
                          {"datetime": "2000-01-01T00:00:00Z/2030-01-01T00:00:00Z"}):  # fmt: skip
                params = {**query, "collections": "acdd-notree", "limit": 2}
                want, _ = _every_page(emb, dict(params))
                got, _ = _every_page(pg, dict(params))
                assert "nowhere" in _by_id(want)
                assert _by_id(got) == _by_id(want)
        finally:
            pg.close()
    finally:  # the module's other tests compare whole searches: leave the database as it was
        with psycopg.connect(loaded.dsn) as conn:
            conn.execute("SELECT pgstac.delete_collection('acdd-notree')")
