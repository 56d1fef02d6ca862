"""``h5sidecar catalog`` and the STAC API search at scale, on synthetic data generated cheaply.

Catalog: DEST holds N hard links of a few small real JSON sidecars (tiny CF grids) under
distinct names; each operation runs in a fresh process (time and peak RSS of that process):
full run, no-op re-run, re-run after 1% of the sidecars changed (replaced by copies: a new
identity).  Search: N random items written straight into the item database (boxes anywhere,
some across the antimeridian, time ranges over a year); ``StacApi`` start-up, then p50/p95 of
bbox+datetime searches (page of 10, ``numberMatched`` counted up to ``StacApi``'s
``count_limit``), searches from "everything" to "one item" (``named``), and the same query through
DuckDB over the collection's stac-geoparquet file when ``duckdb`` imports.

    python -m benchmarks.bench_catalog_scale catalog --n 10000 --work /tmp/cat
    python -m benchmarks.bench_catalog_scale search --n 1000000 --work /tmp/search
    python -m benchmarks.bench_catalog_scale parts --n 100000 --work /tmp/parts

Parts: the stac-geoparquet parts of N random items (the search's), each step in a fresh
process: written whole, then 1% of the items changed in one run of consecutive keys (a
reprocessed day), then 1% changed spread evenly over the keys (every part holds some), then
written whole again (what a rewrite of everything would cost instead).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

T0 = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- catalog ------------------------------------------------------------------------------------
def _make_dest(work: Path, n: int) -> Path:
    import h5py
    import numpy as np

    from h5sidecar.workflows import index_many

    src, seeds, dest = work / "src", work / "seeds", work / "dest"
    for p in (src, seeds, dest):
        shutil.rmtree(p, ignore_errors=True)
        p.mkdir(parents=True)
    for i in range(4):
        with h5py.File(src / f"seed{i}.h5", "w") as f:
            f["lat"] = -60.0 + 30 * i + np.arange(5, dtype="f8")
            f["lon"] = -170.0 + 80 * i + np.arange(6, dtype="f8")
            f["time"] = i * 86400.0 + 3600.0 * np.arange(24)
            f["lat"].attrs["units"], f["lon"].attrs["units"] = "degrees_north", "degrees_east"
            f["time"].attrs["units"] = "seconds since 2020-01-01 00:00:00"
            for name in ("lat", "lon", "time"):
                f[name].make_scale(name)
    assert index_many(str(src), str(seeds), format="json", executor="serial").ok
    firsts = sorted(seeds.glob("*.json"))
    for k in range(n):
        sub = dest / f"d{k // 1000:04d}"
        sub.mkdir(exist_ok=True)
        os.link(firsts[k % len(firsts)], sub / f"g{k:07d}.h5.json")
    return dest


def _catalog_op(work: Path) -> dict[str, Any]:
    from h5sidecar.catalog import build_catalog

    t = time.perf_counter()
    res = build_catalog(str(work / "dest"), work / "stac", collection_id="bench")
    return {"seconds": round(time.perf_counter() - t, 2), "peak_rss_mb": round(_peak_mb()),
            "items": getattr(res, "added", None), "updated": getattr(res, "updated", None),
            "unchanged": getattr(res, "unchanged", None), "errors": len(res.errors)}


def _run_child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_catalog_scale", *args],
                         check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def bench_catalog(n: int, work: Path, *, skip_make: bool = False) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    if not skip_make:
        _make_dest(work, n)
    shutil.rmtree(work / "stac", ignore_errors=True)
    results = {"n": n, "full": _run_child(["catalog-op", "--work", str(work)])}
    results["noop"] = _run_child(["catalog-op", "--work", str(work)])
    changed = sorted((work / "dest").rglob("*.h5.json"))[:: 100]
    for p in changed:  # a copy: new inode and time, same content
        tmp = p.with_suffix(".tmp")
        shutil.copy(p, tmp)
        tmp.replace(p)
    results["one_percent"] = _run_child(["catalog-op", "--work", str(work)])
    results["one_percent"]["changed"] = len(changed)
    return results


# -- search -------------------------------------------------------------------------------------
def _iso(t: dt.datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _item(i: int, rng: random.Random) -> dict[str, Any]:
    w = rng.uniform(-180, 180)
    e = w + rng.uniform(0.5, 5)
    e = e - 360 if e > 180 else e
    s = rng.uniform(-85, 80)
    n = s + rng.uniform(0.5, 5)
    start = T0 + dt.timedelta(hours=rng.uniform(0, 24 * 365))
    parts = [(w, e)] if w <= e else [(w, 180.0), (-180.0, e)]
    polys = [[[[a, s], [b, s], [b, n], [a, n], [a, s]]] for a, b in parts]
    geom = ({"type": "Polygon", "coordinates": polys[0]} if len(polys) == 1
            else {"type": "MultiPolygon", "coordinates": polys})  # fmt: skip
    return {"type": "Feature", "stac_version": "1.1.0", "id": f"g{i:07d}", "geometry": geom,
            "bbox": [w, s, e, n], "links": [], "assets": {"data": {"href": f"s3://b/g{i}.h5"}},
            "properties": {"datetime": None, "start_datetime": _iso(start),
                           "end_datetime": _iso(start + dt.timedelta(minutes=90))}}


def _make_items(work: Path, n: int) -> None:
    from h5sidecar.catalog._item_db import DB_NAME, connect, item_row, write_row
    from h5sidecar.catalog._tree import write_collection, write_root

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rng = random.Random(0)
    db = connect(work / DB_NAME)
    for i in range(n):
        write_row(db, item_row(_item(i, rng), "bench"))
        if i % 50_000 == 0:
            db.commit()
    db.commit()
    db.close()
    coll = {"type": "Collection", "id": "bench", "stac_version": "1.1.0", "description": "b",
            "links": [], "license": "other",
            "extent": {"spatial": {"bbox": [[-180, -90, 180, 90]]},
                       "temporal": {"interval": [[None, None]]}}}  # fmt: skip
    write_collection(work, coll, (), "r")
    write_root(work, "bench", "bench", {"type": "Catalog", "id": "r", "stac_version": "1.1.0",
                                        "description": "r", "links": [], "title": "r"})


def _queries(k: int) -> list[tuple[list[float], str]]:
    rng = random.Random(1)
    out = []
    for _ in range(k):
        w, s = rng.uniform(-180, 170), rng.uniform(-80, 70)
        a = T0 + dt.timedelta(days=rng.uniform(0, 350))
        out.append(([w, s, w + 10, s + 10], f"{_iso(a)}/{_iso(a + dt.timedelta(days=7))}"))
    return out


def bench_search(n: int, work: Path, *, skip_make: bool = False, k: int = 200) -> dict[str, Any]:
    if not skip_make:
        t = time.perf_counter()
        _make_items(work, n)
        print(f"generated {n} items in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    from h5sidecar.catalog import StacApi

    t = time.perf_counter()
    api = StacApi(work)
    startup = time.perf_counter() - t
    times, matched = [], []
    for bbox, when in _queries(k):
        t = time.perf_counter()
        page = api.search({"bbox": bbox, "datetime": when}, "http://x/stac")
        times.append(time.perf_counter() - t)
        matched.append(page["numberMatched"])
    res: dict[str, Any] = {
        "n": n, "startup_s": round(startup, 3),
        "search_p50_ms": round(1000 * statistics.median(times), 2),
        "search_p95_ms": round(1000 * statistics.quantiles(times, n=20)[-1], 2),
        "matched_median": statistics.median(matched), "peak_rss_mb": round(_peak_mb())}
    res["named"] = _named(api, n)
    res["duckdb"] = _duckdb(work, n)
    return res


def _named(api: Any, n: int, k: int = 21) -> dict[str, Any]:
    """p50 (wall and CPU) of searches from "everything" to "one item", with their count."""
    world = [[-180, -90], [180, -90], [180, 90], [-180, 90], [-180, -90]]
    named: dict[str, dict[str, Any]] = {
        "bbox everything": {"bbox": "-180,-90,180,90"},
        "datetime everything": {"datetime": "2000-01-01T00:00:00Z/2100-01-01T00:00:00Z"},
        "no filter": {},
        "intersects everything": {"intersects": {"type": "Polygon", "coordinates": [world]}},
        "60 deg box": {"bbox": "-30,-30,30,30"},
        "60 deg box, 1 month": {"bbox": "-30,-30,30,30",
                                "datetime": "2020-03-01T00:00:00Z/2020-04-01T00:00:00Z"},
        "2 deg box, 1 month": {"bbox": "10,10,12,12",
                               "datetime": "2020-01-01T00:00:00Z/2020-02-01T00:00:00Z"},
        "ids (3)": {"ids": f"g{n // 2:07d},g{n - 1:07d},g0000003"},
    }
    out = {}
    for name, params in named.items():
        wall, cpu = [], []
        for _ in range(k):
            t, c = time.perf_counter(), time.process_time()
            page = api.search(params, "http://x/stac", method="POST")
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        out[name] = {"p50_ms": round(1000 * statistics.median(wall), 2),
                     "cpu_p50_ms": round(1000 * statistics.median(cpu), 2),
                     "matched": page.get("numberMatched", f"> {getattr(api, 'count_limit', '?')}")}
    return out


def _duckdb(work: Path, n: int) -> dict[str, Any] | str:
    try:
        import duckdb
    except ImportError:
        return "duckdb not installed"
    from h5sidecar.catalog._item_db import DB_NAME, connect, iter_docs
    from h5sidecar.catalog.geoparquet._stac_geoparquet import write_geoparquet

    path = work / "bench" / "items.parquet"
    if not path.exists():
        db = connect(work / DB_NAME)
        t = time.perf_counter()
        write_geoparquet(path, lambda: (json.loads(d) for d in iter_docs(db, "bench")), "bench",
                         {"id": "bench"})
        print(f"stac-geoparquet written in {time.perf_counter() - t:.0f} s", file=sys.stderr)
        db.close()
    con = duckdb.connect()
    times = []
    for bbox, when in _queries(50):
        a, b = when.split("/")
        t = time.perf_counter()
        con.execute(
            "SELECT id FROM read_parquet(?) WHERE bbox.xmin <= ? AND bbox.xmax >= ? AND "
            "bbox.ymin <= ? AND bbox.ymax >= ? AND end_datetime >= ?::TIMESTAMPTZ AND "
            "start_datetime <= ?::TIMESTAMPTZ LIMIT 10",
            [str(path), bbox[2], bbox[0], bbox[3], bbox[1], a, b]).fetchall()
        times.append(time.perf_counter() - t)
    return {"p50_ms": round(1000 * statistics.median(times), 1),
            "p95_ms": round(1000 * statistics.quantiles(times, n=20)[-1], 1),
            "file_mb": round(path.stat().st_size / 2**20, 1), "note": "bbox test without the "
            "antimeridian split (a lower bound of the work)"}


# -- stac-geoparquet parts ----------------------------------------------------------------------
def _parts_op(work: Path, step: str) -> dict[str, Any]:
    from h5sidecar.catalog._item_db import DB_NAME, connect
    from h5sidecar.catalog.geoparquet._parts import update_parts

    db = connect(work / DB_NAME)
    n = db.execute("SELECT count(*) FROM items").fetchone()[0]
    if step in ("consecutive", "spread"):  # 1% of the items get a new identity (re-indexed)
        keys = (range(n // 2, n // 2 + n // 100) if step == "consecutive"
                else range(1, n + 1, 100))  # fmt: skip
        db.executemany("UPDATE items SET identity = ? WHERE key = ?",
                       [(f"{step}-{k}", k) for k in keys])  # fmt: skip
        db.commit()

    def docs_of(keys: list[int]) -> Any:
        for i in range(0, len(keys), 500):
            part = keys[i : i + 500]
            q = f"SELECT doc FROM items WHERE key IN ({','.join('?' * len(part))}) ORDER BY key"
            for (doc,) in db.execute(q, part).fetchall():
                yield json.loads(doc)

    t = time.perf_counter()
    res = update_parts(db, work / "bench" / "parts.parquet", "bench", {"id": "bench"}, docs_of,
                       full=step == "full")  # fmt: skip
    return {"seconds": round(time.perf_counter() - t, 2), "peak_rss_mb": round(_peak_mb()),
            "converted": res.converted, "written": res.written, "removed": res.removed,
            "full": res.full}


def bench_parts(n: int, work: Path, *, skip_make: bool = False) -> dict[str, Any]:
    if not skip_make:
        _make_items(work, n)
    out: dict[str, Any] = {"n": n}
    for step in ("full", "consecutive", "spread", "full"):
        key = "full_again" if step == "full" and "full" in out else step
        out[key] = _run_child(["parts-op", "--step", step, "--work", str(work)])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("what", choices=["catalog", "search", "catalog-op", "parts", "parts-op"])
    p.add_argument("--step", default="full", choices=["full", "consecutive", "spread"])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--skip-make", action="store_true", help="reuse the generated data")
    a = p.parse_args(argv)
    if a.what == "catalog-op":
        res = _catalog_op(a.work)
    elif a.what == "catalog":
        res = bench_catalog(a.n, a.work, skip_make=a.skip_make)
    elif a.what == "parts":
        res = bench_parts(a.n, a.work, skip_make=a.skip_make)
    elif a.what == "parts-op":
        res = _parts_op(a.work, a.step)
    else:
        res = bench_search(a.n, a.work, skip_make=a.skip_make)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
