"""The stac-geoparquet parts of a collection: after every run (items added, changed, removed, a
new property, many small runs, a killed run) pyarrow, pyarrow.dataset and DuckDB read exactly
the items of the item database, once each; a run writes only the parts that held what changed."""

from __future__ import annotations

import datetime as dt
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from h5sidecar.catalog._item_db import DB_NAME, connect, item_row, write_row
from h5sidecar.catalog.geoparquet import _parts as parts_mod
from h5sidecar.catalog.geoparquet._parts import update_parts

T0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
CID = "c"


def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _doc(i: int, version: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    rng = random.Random(i * 1000 + version)
    w, s = rng.uniform(-170, 160), rng.uniform(-80, 70)
    box = [w, s, w + 5, s + 5]
    geom = {"type": "Polygon", "coordinates": [[[w, s], [w + 5, s], [w + 5, s + 5], [w, s + 5],
                                                [w, s]]]}  # fmt: skip
    start = T0 + dt.timedelta(hours=rng.uniform(0, 9000))
    props = {"datetime": None, "start_datetime": _iso(start),
             "end_datetime": _iso(start + dt.timedelta(hours=1)), "version": version,
             **(extra or {})}  # fmt: skip
    return {"type": "Feature", "stac_version": "1.1.0", "id": f"g{i:04d}", "geometry": geom,
            "bbox": box, "properties": props, "links": [], "assets": {
                "data": {"href": f"s3://b/g{i}.h5", "roles": ["data"]}}}  # fmt: skip


class Catalog:
    """An item database with one collection, written as ``h5sidecar catalog`` writes it."""

    def __init__(self, folder: Path) -> None:
        self.db = connect(folder / DB_NAME)
        self.folder = folder / CID / "items.parquet"
        self.keys: dict[int, int] = {}

    def put(self, i: int, version: int, extra: dict[str, Any] | None = None) -> None:
        row = item_row(_doc(i, version, extra), CID, dest="d", sidecar=f"d/g{i}.json",
                       identity=f"v{version}")  # fmt: skip
        self.keys[i] = write_row(self.db, row, self.keys.get(i))

    def drop(self, i: int) -> None:
        from h5sidecar.catalog._item_db import delete_rows

        delete_rows(self.db, [self.keys.pop(i)])

    def run(self, full: bool = False) -> parts_mod.PartsUpdate:
        self.db.commit()

        def docs_of(keys: list[int]):  # as Run._docs_of: in key order
            q = f"SELECT doc FROM items WHERE key IN ({','.join('?' * len(keys))}) ORDER BY key"
            for (doc,) in self.db.execute(q, keys).fetchall():
                yield json.loads(doc)

        return update_parts(self.db, self.folder, CID, {"id": CID, "type": "Collection"},
                            docs_of, full=full)  # fmt: skip

    def expected(self) -> list[tuple[str, int]]:
        return sorted((json.loads(d)["id"], json.loads(d)["properties"]["version"])
                      for (d,) in self.db.execute("SELECT doc FROM items"))  # fmt: skip

    def files(self) -> dict[str, int]:
        return {p.name: p.stat().st_ino for p in self.folder.iterdir()}


def _read_all(folder: Path) -> dict[str, list[tuple[str, int]]]:
    """(id, version) of every row, as each reader sees the folder."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    out = {}
    t = pq.read_table(folder)
    out["pyarrow.parquet"] = sorted(zip(t.column("id").to_pylist(),
                                        t.column("version").to_pylist(), strict=True))  # fmt: skip
    t = ds.dataset(folder, format="parquet").to_table(columns=["id", "version"])
    out["pyarrow.dataset"] = sorted(zip(t.column("id").to_pylist(),
                                        t.column("version").to_pylist(), strict=True))  # fmt: skip
    try:
        import duckdb
    except ImportError:
        pass
    else:
        con = duckdb.connect()
        out["duckdb"] = sorted(con.execute(
            "SELECT id, version FROM read_parquet(?)", [str(folder / "*.parquet")]).fetchall())
    return out


def _check(cat: Catalog) -> None:
    want = cat.expected()
    for reader, got in _read_all(cat.folder).items():
        assert got == want, reader


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parts_mod, "PART_ROWS", 50)
    monkeypatch.setattr(parts_mod, "MAX_SMALL_PARTS", 4)


def test_runs_write_only_what_changed(tmp_path: Path, small_parts: None) -> None:
    cat = Catalog(tmp_path)
    for i in range(200):
        cat.put(i, 1)
    res = cat.run()
    assert res.full and res.converted == 200 and len(cat.files()) == 4
    _check(cat)
    assert cat.run() == parts_mod.PartsUpdate(0, 0, 0, False)  # nothing changed: nothing done

    before = cat.files()
    cat.put(7, 2)  # changed: in the first part
    cat.drop(120)  # removed: in the third part
    res = cat.run()
    assert (res.converted, res.written, res.removed, res.full) == (1, 3, 2, False)
    after = cat.files()
    kept = {n for n in before if after.get(n) == before[n]}
    assert kept == {"part-000002.parquet", "part-000004.parquet"}  # untouched parts stay
    _check(cat)

    for i in range(200, 230):  # new items, one run each: small parts, merged as they pile up
        cat.put(i, 1)
        cat.put(i - 150, 3)
        res = cat.run()
        assert not res.full and res.converted == 2
        small = [n for n, c in cat.db.execute(
            "SELECT part, count(*) FROM parquet_rows GROUP BY part") if c < 25]
        assert len(small) <= 4
        _check(cat)


def test_schema_growth_rewrites_every_part(tmp_path: Path, small_parts: None) -> None:
    cat = Catalog(tmp_path)
    for i in range(120):
        cat.put(i, 1)
    cat.run()
    cat.put(5, 2, {"eo:cloud_cover": 12.5})  # a property no part has a column for
    res = cat.run()
    assert res.full
    _check(cat)
    import pyarrow.parquet as pq

    covers = pq.read_table(cat.folder).column("eo:cloud_cover").to_pylist()
    assert sorted(c for c in covers if c is not None) == [12.5]
    cat.put(6, 2, {"eo:cloud_cover": 3.0})  # now in the schema: incremental again
    assert not cat.run().full
    _check(cat)


def test_a_killed_run_and_an_old_single_file_are_repaired(tmp_path: Path, small_parts: None) -> None:
    cat = Catalog(tmp_path)
    for i in range(120):
        cat.put(i, 1)
    cat.folder.parent.mkdir(parents=True)
    cat.folder.write_bytes(b"PAR1 an items.parquet file of an earlier version")
    assert cat.run().full
    _check(cat)
    names = sorted(cat.files())
    # a run killed after writing a part, before recording it: that file is deleted
    shutil.copy(cat.folder / names[0], cat.folder / "part-000099.parquet")
    # and a part lost: its items are written again
    (cat.folder / names[1]).unlink()
    res = cat.run()
    assert not res.full and res.converted == 50
    assert "part-000099.parquet" not in cat.files()
    _check(cat)
    # every item removed: no part left
    for i in range(120):
        cat.drop(i)
    cat.run()
    assert cat.files() == {}
    assert cat.db.execute("SELECT count(*) FROM parquet_rows").fetchone()[0] == 0
