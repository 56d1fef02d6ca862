"""``h5sidecar catalog`` re-runs: only new, changed and removed sidecars cost work (a run that
changed nothing writes nothing), the stac-geoparquet file holds the JSON tree's items, and a
collection past the JSON-tree threshold is still searchable.  Item values are compared with
what h5py reads from the granules."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from h5sidecar.catalog import StacApi, build_catalog

BASE = "http://gateway.test/stac"
EPOCH = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def _granule(path: Path, west: float, south: float, day: int) -> Path:
    """A small CF grid: 1-degree cells from (west, south), 24 hourly steps on day ``day``."""
    with h5py.File(path, "w") as f:
        f["lat"] = south + np.arange(5, dtype="f8")
        f["lat"].attrs["units"] = "degrees_north"
        f["lon"] = west + np.arange(6, dtype="f8")
        f["lon"].attrs["units"] = "degrees_east"
        f["time"] = day * 86400.0 + 3600.0 * np.arange(24)
        f["time"].attrs["units"] = "seconds since 2020-01-01 00:00:00"
        f["time"].attrs["standard_name"] = "time"
        for name in ("lat", "lon", "time"):
            f[name].make_scale(name)
        f["t"] = np.zeros((24, 5, 6), "f4")
        for i, name in enumerate(("time", "lat", "lon")):
            f["t"].dims[i].attach_scale(f[name])
    return path


def _index(src: Path, dest: Path, *, force: bool = False) -> None:
    from h5sidecar.workflows import index_many

    assert index_many(str(src), str(dest), format="json", executor="serial", force=force).ok


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in folder.rglob("*") if p.is_file()}  # fmt: skip


def _h5py_extent(path: Path) -> tuple[list[float], dt.datetime, dt.datetime]:
    with h5py.File(path, "r") as f:
        lat, lon, t = f["lat"][()], f["lon"][()], f["time"][()]
    bbox = [float(lon.min()), float(lat.min()), float(lon.max()), float(lat.max())]
    return bbox, EPOCH + dt.timedelta(seconds=float(t.min())), \
        EPOCH + dt.timedelta(seconds=float(t.max()))


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    src, dest, stac = tmp_path / "src", tmp_path / "dest", tmp_path / "stac"
    src.mkdir()
    for i, name in enumerate(("a", "b", "c")):
        _granule(src / f"{name}.h5", west=10.0 * i, south=-20.0 + 5 * i, day=i)
    _index(src, dest)
    res = build_catalog(str(dest), stac, collection_id="grids")
    assert res.ok and (res.added, res.updated, res.removed, res.unchanged) == (3, 0, 0, 0)
    return src, dest, stac


def _item(stac: Path, item_id: str) -> dict:
    return json.loads((stac / "grids" / item_id / f"{item_id}.json").read_text())


def test_items_match_h5py(setup: tuple[Path, Path, Path]) -> None:
    src, _, stac = setup
    for name in ("a", "b", "c"):
        bbox, start, end = _h5py_extent(src / f"{name}.h5")
        item = _item(stac, name)
        assert item["bbox"] == pytest.approx(bbox)
        props = item["properties"]
        assert dt.datetime.fromisoformat(props["start_datetime"]) == start
        assert dt.datetime.fromisoformat(props["end_datetime"]) == end


def test_noop_rerun_reads_and_writes_nothing(setup: tuple[Path, Path, Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _, dest, stac = setup
    before = _snapshot(stac)

    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("an unchanged sidecar was read")

    monkeypatch.setattr("h5sidecar.catalog._catalogue.read_refs", no_read)
    res = build_catalog(str(dest), stac, collection_id="grids")
    assert res.ok and (res.added, res.updated, res.removed, res.unchanged) == (0, 0, 0, 3)
    assert _snapshot(stac) == before
    assert len(res.items) == 3


def test_changed_sidecar_updates_its_item_only(setup: tuple[Path, Path, Path]) -> None:
    src, dest, stac = setup
    before = _snapshot(stac)
    _granule(src / "b.h5", west=100.0, south=40.0, day=30)  # moved in space and time
    _index(src / "b.h5", dest, force=True)
    res = build_catalog(str(dest), stac, collection_id="grids")
    assert (res.added, res.updated, res.removed, res.unchanged) == (0, 1, 0, 2)
    after = _snapshot(stac)
    changed = {k for k in after if after[k] != before.get(k)}
    parts = {k for k in changed if k.startswith("grids/items.parquet/")}
    assert changed - parts == {"grids/b/b.json", "grids/collection.json", "_items.sqlite"}
    # the part that held b is written again without it, b goes into a new part
    assert sorted(parts) == ["grids/items.parquet/part-000002.parquet",
                             "grids/items.parquet/part-000003.parquet"]
    assert sorted(p for p in after if p.startswith("grids/items.parquet/")) == sorted(parts)
    bbox, start, _ = _h5py_extent(src / "b.h5")
    assert _item(stac, "b")["bbox"] == pytest.approx(bbox)
    api = StacApi(stac)
    found = api.search({"bbox": "101,41,102,42"}, BASE)
    assert [f["id"] for f in found["features"]] == ["b"]
    assert api.search({"bbox": "11,-19,12,-18"}, BASE)["numberMatched"] == 0  # b's old place
    day = start.date().isoformat()
    assert [f["id"] for f in api.search({"datetime": f"{day}T05:00:00Z"}, BASE)["features"]] \
        == ["b"]


def test_removed_sidecar_removes_its_item(setup: tuple[Path, Path, Path]) -> None:
    import pyarrow.parquet as pq

    _, dest, stac = setup
    (dest / "c.h5.json").unlink()
    res = build_catalog(str(dest), stac, collection_id="grids")
    assert (res.added, res.updated, res.removed, res.unchanged) == (0, 0, 1, 2)
    assert not (stac / "grids" / "c").exists()
    coll = json.loads((stac / "grids" / "collection.json").read_text())
    assert [lk["href"] for lk in coll["links"] if lk["rel"] == "item"] == [
        "./a/a.json", "./b/b.json"]
    assert pq.read_table(stac / "grids" / "items.parquet").column("id").to_pylist() == ["a", "b"]
    api = StacApi(stac)
    assert api.search({}, BASE)["numberMatched"] == 2
    with pytest.raises(Exception, match="no item 'c'"):
        api.item("grids", "c", BASE)


def test_geoparquet_holds_the_json_tree_items(setup: tuple[Path, Path, Path]) -> None:
    import pyarrow.parquet as pq
    import shapely
    from shapely.geometry import shape

    _, _, stac = setup
    table = pq.read_table(stac / "grids" / "items.parquet")
    meta = table.schema.metadata
    geo = json.loads(meta[b"geo"])
    assert geo["primary_column"] == "geometry" and geo["columns"]["geometry"]["encoding"] == "WKB"
    sgp = json.loads(meta[b"stac-geoparquet"])
    assert sgp["version"] == "1.1.0" and sgp["collections"]["grids"]["id"] == "grids"
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == ["a", "b", "c"]
    for row in rows:
        item = _item(stac, row["id"])
        assert row["collection"] == "grids" and row["stac_version"] == item["stac_version"]
        assert list(row["bbox"].values()) == item["bbox"]
        assert shapely.from_wkb(row["geometry"]).equals(shape(item["geometry"]))
        for key in ("start_datetime", "end_datetime"):
            assert row[key] == dt.datetime.fromisoformat(item["properties"][key])
        assert json.loads(row["h5sidecar:attributes"]) == item["properties"][
            "h5sidecar:attributes"]
        assert {k: a["href"] for k, a in row["assets"].items() if a} == {
            k: a["href"] for k, a in item["assets"].items()}
        refs = row["assets"]["references"]
        assert json.loads(refs["xarray:open_kwargs"]) == item["assets"]["references"][
            "xarray:open_kwargs"]


def test_without_json_tree_items_are_searchable(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    for i in range(3):
        _granule(src / f"g{i}.h5", west=-179.0 + 60 * i, south=0.0, day=i)
    _index(src, dest)
    res = build_catalog(str(dest), tmp_path / "stac", json_tree=False)
    assert res.ok and res.items == ()
    coll = json.loads(Path(res.collection).read_text())
    assert not [lk for lk in coll["links"] if lk["rel"] == "item"]
    assert not list((tmp_path / "stac").glob("*/*/*.json"))
    api = StacApi(tmp_path / "stac")
    assert [f["id"] for f in api.search({"bbox": "-120,1,-110,2"}, BASE)["features"]] == ["g1"]
    assert api.item(res.collection_id, "g2", BASE)["bbox"][0] == pytest.approx(-59.0)


def test_cli_rerun_says_what_changed(setup: tuple[Path, Path, Path], capsys) -> None:
    from h5sidecar.cli import main

    _, dest, stac = setup
    capsys.readouterr()
    assert main(["catalog", str(dest), "-o", str(stac), "--collection-id", "grids"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "3 item(s) in collection grids" in printed
    assert "0 added, 0 updated, 0 removed, 3 unchanged" in printed
    assert main(["catalog", str(dest), "-o", str(stac), "--collection-id", "grids",
                 "--no-json-tree", "--no-geoparquet", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["items"] == [] and res["geoparquet"] == "" and res["n_items"] == 3
    assert not (stac / "grids" / "a").exists()


def test_noop_rerun_skips_the_parts_check_unless_a_run_was_cut(
    setup: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stac-geoparquet parts are compared with every item only when an item changed since
    they were last brought up to date: not on a no-op run, but after a run killed between its
    item changes and its parts (the item's change dropped the mark in its own transaction)."""
    import sqlite3

    import pyarrow.parquet as pq

    from h5sidecar.catalog.geoparquet import _parts as _geoparquet_parts

    src, dest, stac = setup
    calls: list[str] = []
    real = _geoparquet_parts.update_parts

    def counted(*args: object, **kwargs: object) -> object:
        calls.append("parts")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_geoparquet_parts, "update_parts", counted)
    build_catalog(str(dest), stac, collection_id="grids")
    assert calls == []  # nothing changed
    # a run killed after writing b's new item, before its parts
    _granule(src / "b.h5", west=100.0, south=40.0, day=30)
    _index(src / "b.h5", dest, force=True)
    monkeypatch.setattr(_geoparquet_parts, "update_parts", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        build_catalog(str(dest), stac, collection_id="grids")
    monkeypatch.setattr(_geoparquet_parts, "update_parts", counted)
    res = build_catalog(str(dest), stac, collection_id="grids")  # b is unchanged for it now
    assert res.unchanged == 3 and calls == ["parts"]
    table = pq.read_table(stac / "grids" / "items.parquet")
    rows = dict(zip(table.column("id").to_pylist(), table.column("bbox").to_pylist(), strict=True))
    assert rows["b"]["xmin"] == pytest.approx(_item(stac, "b")["bbox"][0])
    db = sqlite3.connect(stac / "_items.sqlite")
    assert db.execute("SELECT count(*) FROM parquet_clean").fetchone()[0] == 1
