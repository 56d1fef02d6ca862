"""The catalog over HTTP: the gateway's ``/stac/`` routes searched with pystac-client, the
gateway's Zarr asset and a JSON references asset (on a plain static web server) opened with
xpystac, values compared with h5py."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import httpx
import numpy as np
import pystac_client
import pytest
import xarray as xr

from h5sidecar.catalog import StacApi, build_catalog
from h5sidecar.gateway.app import create_app
from h5sidecar.settings import GatewaySettings
from tests.catalog.conftest import Indexed
from tests.conftest import free_port
from tests.gateway._http import running

#: one xdist worker for the session's sample granules and catalog (where grouping works)
pytestmark = pytest.mark.xdist_group("catalog")


@contextmanager
def _static_server(folder: Path) -> Iterator[str]:
    """A plain web server publishing ``folder`` on 127.0.0.1 (what --references-base-url is
    for: DEST behind any static host)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def stac_gateway(indexed: Indexed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway over the Parquet DEST with its catalog (zarr assets pointing at it)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stac = tmp_path_factory.mktemp("stac-http")
    assert build_catalog(str(indexed.dest_parquet), stac, collection_id="samples",
                         gateway_url=url).ok
    app = create_app(GatewaySettings(), str(indexed.dest_parquet), stac_api=StacApi(stac))
    with running(app, port):
        yield url


def test_pystac_client_searches_the_gateway(stac_gateway: str, indexed: Indexed) -> None:
    client = pystac_client.Client.open(f"{stac_gateway}/stac/")
    assert client.conforms_to("ITEM_SEARCH")
    everything = list(client.search(max_items=None).items())  # POST, the default
    assert sorted(i.id for i in everything) == sorted(
        [p.stem for p in indexed.atl03] + ["gridded_sample"])
    track = next(i for i in everything if i.id == indexed.atl03[1].stem)
    w, s, _, _ = track.bbox
    hits = client.search(bbox=[w, s, w + 0.01, s + 0.01], method="GET", limit=1)
    assert sorted(i.id for i in hits.items()) == sorted([track.id, "gridded_sample"])
    start = track.properties["start_datetime"]
    hits = client.search(datetime=f"{start}/{track.properties['end_datetime']}",
                         collections=["samples"])
    assert [i.id for i in hits.items()] == [track.id]
    # intersects (POST, GeoJSON): a point on the track's footprint
    from shapely.geometry import shape

    on = shape(track.geometry).representative_point()
    hits = client.search(intersects={"type": "Point", "coordinates": [on.x, on.y]},
                         collections=["samples"])
    assert sorted(i.id for i in hits.items()) == sorted([track.id, "gridded_sample"])
    # paging: one item per page, every item once
    pages = list(client.search(limit=1, method="GET").pages())
    assert len(pages) == 3 and all(len(p.items) == 1 for p in pages)
    coll = client.get_collection("samples")
    assert sorted(i.id for i in coll.get_items()) == sorted(i.id for i in everything)


def test_xpystac_opens_the_gateway_zarr_asset(stac_gateway: str, indexed: Indexed) -> None:
    client = pystac_client.Client.open(f"{stac_gateway}/stac/")
    path = indexed.atl03[0]
    item = next(client.search(ids=[path.stem]).items())
    asset = item.assets["zarr"]
    assert asset.href == f"{stac_gateway}/zarr/{path.name}/"
    ds = xr.open_dataset(asset, engine="stac", group="gt3l/heights", chunks=None)
    with h5py.File(path) as f:
        for name in ("h_ph", "lat_ph", "quality_ph"):
            np.testing.assert_array_equal(ds[name].values, f[f"gt3l/heights/{name}"][:])


def test_xpystac_opens_a_json_references_asset_over_http(indexed: Indexed, tmp_path: Path) -> None:
    """xpystac fetches a JSON references asset and hands the parsed JSON to the asset's engine
    (``h5sidecar``), which also opens the nested groups of an ATL03 granule."""
    import pystac

    from h5sidecar.workflows import index_many

    dest = tmp_path / "dest"
    for path in (indexed.netcdf, indexed.atl03[0]):
        assert index_many(str(path), str(dest), format="json", executor="serial").ok
    with _static_server(dest) as base:
        res = build_catalog(str(dest), tmp_path / "stac", references_base_url=base)
        items = {Path(p).parent.name: pystac.Item.from_file(p) for p in res.items}
        asset = items["gridded_sample"].assets["references"]
        assert asset.href == f"{base}/{indexed.netcdf.name}.json"
        assert asset.roles == ["references", "index"] and asset.media_type == "application/json"
        ds = xr.open_dataset(asset, engine="stac", mask_and_scale=False, decode_times=False)
        with h5py.File(indexed.netcdf) as f:
            for name in ("tas", "pr", "orog", "time", "lat"):
                np.testing.assert_array_equal(ds[name].values, f[name][:])
        asset = items[indexed.atl03[0].stem].assets["references"]
        ds = xr.open_dataset(asset, engine="stac", group="gt1l/heights", mask_and_scale=False)
        with h5py.File(indexed.atl03[0]) as f:
            for name in ("h_ph", "lat_ph", "quality_ph"):
                np.testing.assert_array_equal(ds[name].values, f[f"gt1l/heights/{name}"][:])


def test_stac_http_errors(stac_gateway: str, indexed: Indexed) -> None:
    r = httpx.get(f"{stac_gateway}/stac/search", params={"bbox": "1,2,3"})
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"
    assert "4 (or 6) numbers" in r.json()["message"]
    r = httpx.post(f"{stac_gateway}/stac/search", content=b"[1, 2]")
    assert r.status_code == 400
    r = httpx.post(f"{stac_gateway}/stac/search", json={"ids": [indexed.atl03[0].stem]})
    assert r.status_code == 200 and r.json()["numberMatched"] == 1
    assert httpx.post(f"{stac_gateway}/stac/collections").status_code == 405
    assert httpx.get(f"{stac_gateway}/stac/collections/nope").status_code == 404
    r = httpx.get(f"{stac_gateway}/stac/catalog.json")
    assert r.status_code == 200 and r.json()["type"] == "Catalog"
    assert httpx.get(f"{stac_gateway}/stac/..%2f..%2fetc/passwd").status_code in (400, 404)
    # a gateway started without a catalog says how to get one
    app = create_app(GatewaySettings(), str(indexed.dest_parquet))
    with running(app) as url:
        r = httpx.get(f"{url}/stac/")
        assert r.status_code == 404 and "--stac STACDIR" in r.json()["message"]
