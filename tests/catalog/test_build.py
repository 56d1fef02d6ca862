"""``build_catalog`` / ``h5sidecar catalog``: documents validate offline, and every item's
footprint, time range, properties and assets agree with what h5py reads from the granule."""

from __future__ import annotations

import copy
import datetime as dt
import json
import socket
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.catalog import STACValidationError, build_catalog, validate_document, validate_tree
from h5sidecar.cli import main
from h5sidecar.errors import SourceNotFoundError
from tests.catalog._geo import inside_bbox, inside_geometry
from tests.catalog.conftest import Indexed

#: one xdist worker for the session's sample granules and catalog (where grouping works)
pytestmark = pytest.mark.xdist_group("catalog")

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
GPS_EPOCH = dt.datetime(1980, 1, 6, tzinfo=dt.UTC)
GPS_MINUS_UTC = 18.0  # leap seconds since the GPS epoch, for every date after 2017


def _items(stac: Path, collection: str) -> dict[str, dict]:
    coll = stac / collection
    return {p.stem: json.loads(p.read_text()) for p in coll.glob("*/*.json")}


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def test_every_document_validates_without_network(catalog_dir: Path, monkeypatch) -> None:
    def no_network(*args, **kwargs):
        raise AssertionError("validation tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    n_items = len(_items(catalog_dir, "samples")) + len(_items(catalog_dir, "samples-json"))
    assert n_items == 4
    assert validate_tree(catalog_dir / "catalog.json") == 1 + 2 + n_items


def test_validation_rejects_broken_documents(catalog_dir: Path) -> None:
    item = next(iter(_items(catalog_dir, "samples").values()))
    validate_document(item)
    bad_size = copy.deepcopy(item)
    bad_size["assets"]["data"]["file:size"] = -1
    with pytest.raises(STACValidationError, match=r"file/v2\.1\.0"):
        validate_document(bad_size)
    bad_bbox = copy.deepcopy(item)
    bad_bbox["bbox"] = bad_bbox["bbox"][:3]
    with pytest.raises(STACValidationError, match=r"item\.json"):
        validate_document(bad_bbox)
    no_time = copy.deepcopy(item)
    del no_time["properties"]["start_datetime"]
    with pytest.raises(STACValidationError):
        validate_document(no_time)
    unknown = copy.deepcopy(item)
    unknown["stac_extensions"].append("https://stac-extensions.github.io/eo/v1.1.0/schema.json")
    with pytest.raises(STACValidationError, match="not shipped"):
        validate_document(unknown)


def test_track_items_match_h5py(indexed: Indexed, catalog_dir: Path) -> None:
    items = _items(catalog_dir, "samples")
    for path in indexed.atl03:
        item = items[path.stem]
        with h5py.File(path) as f:
            lat = np.concatenate([f[f"{b}/heights/lat_ph"][:] for b in BEAMS])
            lon = np.concatenate([f[f"{b}/heights/lon_ph"][:] for b in BEAMS])
            times = np.concatenate([f[f"{b}/heights/delta_time"][:] for b in BEAMS])
            epoch = float(f["ancillary_data/atlas_sdp_gps_epoch"][0])
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        # every photon lies in the footprint and the box, which hug the data
        assert item["geometry"]["type"] == "Polygon"
        assert inside_geometry(item["geometry"], lon, lat).all()
        assert inside_bbox(item["bbox"], lon, lat).all()
        w, s, e, n = item["bbox"]
        assert abs(w - lon.min()) < 0.01 and abs(e - lon.max()) < 0.01
        assert abs(s - lat.min()) < 0.01 and abs(n - lat.max()) < 0.01
        # time range: photon delta_time from the GPS epoch of the product, in UTC
        start = GPS_EPOCH + dt.timedelta(seconds=epoch + times.min() - GPS_MINUS_UTC)
        end = GPS_EPOCH + dt.timedelta(seconds=epoch + times.max() - GPS_MINUS_UTC)
        props = item["properties"]
        assert props["datetime"] is None
        assert abs(_time(props["start_datetime"]) - start) < dt.timedelta(microseconds=2)
        assert abs(_time(props["end_datetime"]) - end) < dt.timedelta(microseconds=2)
        # the granule's own metadata agrees (to its 1-microsecond text resolution)
        assert abs(_time(props["start_datetime"]) - _time(attrs["time_coverage_start"])) \
            < dt.timedelta(milliseconds=1)
        assert props["platform"] == "icesat-2" and props["instruments"] == ["atlas"]
        assert props["h5sidecar:attributes"]["short_name"] == "ATL03"
        assert props["h5sidecar:footprint_from"][0] == "gt1l/geolocation/reference_photon_lat"
        assert props["h5sidecar:variables"]["skipped"] == 0
        assert props["h5sidecar:variables"]["virtual"] > 100


def test_gridded_item_matches_h5py(indexed: Indexed, catalog_dir: Path) -> None:
    item = _items(catalog_dir, "samples")[indexed.netcdf.stem]
    with h5py.File(indexed.netcdf) as f:
        lat, lon = f["lat"][:], f["lon"][:]
        bounds = f["time_bnds"][:]
    assert item["bbox"][1] == pytest.approx(lat.min()) and item["bbox"][3] == pytest.approx(
        lat.max())
    assert lon.max() - lon.min() > 350  # 0..358 every 2 degrees: the whole globe
    assert (item["bbox"][0], item["bbox"][2]) == (-180.0, 180.0)
    epoch = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    props = item["properties"]
    assert _time(props["start_datetime"]) == epoch + dt.timedelta(days=float(bounds.min()))
    assert _time(props["end_datetime"]) == epoch + dt.timedelta(days=float(bounds.max()))
    assert props["h5sidecar:time_from"] == "variables: time_bnds"


def test_assets_and_collection(indexed: Indexed, catalog_dir: Path) -> None:
    items = _items(catalog_dir, "samples")
    path = indexed.atl03[0]
    assets = items[path.stem]["assets"]
    assert assets["data"]["href"] == str(path)
    assert assets["data"]["type"] == "application/x-hdf5" and assets["data"]["roles"] == ["data"]
    assert assets["data"]["file:size"] == path.stat().st_size
    ref = assets["references"]
    sidecar = indexed.dest_parquet / f"{path.name}.parq"
    assert ref["href"] == str(sidecar)
    assert ref["type"] == "application/vnd.apache.parquet"
    assert ref["roles"] == ["references", "kerchunk-parquet"]
    assert ref["file:size"] == sum(p.stat().st_size for p in sidecar.rglob("*") if p.is_file())
    assert ref["xarray:open_kwargs"] == {"engine": "h5sidecar"}
    assert ref["xarray:storage_options"] == {}
    assert assets["zarr"] == {
        "href": f"http://127.0.0.1:9/zarr/{path.name}/", "type": "application/vnd+zarr",
        "title": "Zarr v2 store served by the h5sidecar gateway", "roles": ["data", "zarr"],
        "xarray:open_kwargs": {"engine": "zarr", "consolidated": True}}
    assert "https://stac-extensions.github.io/xarray-assets/v1.0.0/schema.json" in (
        items[path.stem]["stac_extensions"])
    json_item = _items(catalog_dir, "samples-json")[path.stem]
    ref = json_item["assets"]["references"]
    assert ref["type"] == "application/json" and ref["roles"] == ["references", "index"]
    assert ref["file:size"] == (indexed.dest_json / f"{path.name}.json").stat().st_size
    assert "zarr" not in json_item["assets"]
    # the collection's extent is the union of its items'
    coll = json.loads((catalog_dir / "samples" / "collection.json").read_text())
    starts = [_time(i["properties"]["start_datetime"]) for i in items.values()]
    ends = [_time(i["properties"]["end_datetime"]) for i in items.values()]
    interval = coll["extent"]["temporal"]["interval"][0]
    assert (_time(interval[0]), _time(interval[1])) == (min(starts), max(ends))
    assert coll["extent"]["spatial"]["bbox"][0] == [-180.0, -89.0, 180.0, 89.0]


def test_rebuild_replaces_its_collection_and_keeps_others(indexed: Indexed,
                                                           tmp_path: Path) -> None:
    first = build_catalog(str(indexed.dest_json), tmp_path, collection_id="a")
    build_catalog(str(indexed.dest_json), tmp_path, collection_id="b")
    again = build_catalog(str(indexed.dest_json), tmp_path, collection_id="a",
                          references_base_url="https://data.example/refs")
    root = json.loads((tmp_path / "catalog.json").read_text())
    assert sorted(link["href"] for link in root["links"] if link["rel"] == "child") == [
        "./a/collection.json", "./b/collection.json"]
    assert first.items == again.items
    item = json.loads(Path(again.items[0]).read_text())
    assert item["assets"]["references"]["href"] == (
        f"https://data.example/refs/{indexed.atl03[0].name}.json")


def test_granule_without_time_is_left_out_with_a_reason(tmp_path: Path) -> None:
    from h5sidecar.workflows import index_many

    src = tmp_path / "src"
    src.mkdir()
    with h5py.File(src / "timeless.h5", "w") as f:
        f["lat"] = np.linspace(0, 1, 5)
        f["lat"].attrs["units"] = "degrees_north"
        f["lon"] = np.linspace(0, 1, 5)
        f["lon"].attrs["units"] = "degrees_east"
        f["lat"].make_scale("lat")
        f["lon"].make_scale("lon")
    assert index_many(str(src), str(tmp_path / "dest"), executor="serial").ok
    res = build_catalog(str(tmp_path / "dest"), tmp_path / "stac")
    assert not res.ok and res.items == ()
    [err] = res.errors
    assert err.name == "timeless.h5" and err.kind == "no_time"
    assert "time_coverage_start" in err.hint


def test_cli_reports_a_left_out_granule_once(tmp_path: Path, capsys) -> None:
    from h5sidecar.workflows import index_many

    src = tmp_path / "src"
    src.mkdir()
    with h5py.File(src / "timeless.h5", "w") as f:
        f["lat"] = np.linspace(0, 1, 5)
    assert index_many(str(src), str(tmp_path / "dest"), executor="serial").ok
    capsys.readouterr()
    assert main(["catalog", str(tmp_path / "dest"), "-o", str(tmp_path / "stac")]) == 1
    cap = capsys.readouterr()
    printed = cap.out + cap.err
    assert printed.count("timeless.h5") == 1, printed
    assert "LEFT OUT" in printed and "no_time" in printed


def test_empty_dest_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    with pytest.raises(SourceNotFoundError, match="h5sidecar index"):
        build_catalog(str(tmp_path / "dest"), tmp_path / "stac")


def test_cli_catalog(indexed: Indexed, tmp_path: Path, capsys) -> None:
    rc = main(["catalog", str(indexed.dest_json), "-o", str(tmp_path / "stac"),
               "--gateway-url", "http://127.0.0.1:8000", "--collection-id", "cli", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["collection_id"] == "cli" and len(out["items"]) == 1 and out["errors"] == []
    item = json.loads(Path(out["items"][0]).read_text())
    assert item["assets"]["zarr"]["href"].startswith("http://127.0.0.1:8000/zarr/")
    assert main(["catalog", str(tmp_path / "nowhere"), "-o", str(tmp_path / "s2")]) == 2

