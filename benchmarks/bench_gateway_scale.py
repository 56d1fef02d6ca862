"""``h5sidecar serve DEST`` at 10k, 100k and 1M granules: startup, pages, lookups, memory.

One small granule is indexed into a template DEST (which gets its record); each size copies
it and inserts N synthetic rows directly into the record (one transaction), named like a
source mirrored by day (``YYYY/DDD/gNNNNNNN.h5``).  The first ``--files`` of them get a sidecar
(hard links of the real one, a fresh inode every 50,000 links); the others exist only in the
record (enough for listing and lookups; a listing-based gateway does not see them).

The gateway runs in its own process (``python -m h5sidecar.cli serve``, the code under
``--code``, so the code before a change can be measured from another worktree).  Reported:

* startup: process start to the first page of ``/api/granules`` answered (imports included;
  ``import`` is the same with an empty DEST);
* page: median time of ``/api/granules?limit=1000`` pages, following ``next`` (20 pages);
* lookup: median time of ``GET /zarr/<name>/.zgroup`` of a granule with a sidecar (after a first
  load, so the sidecar is cached: what remains is the lookup) and of an unknown name (404);
* search: one ``q=`` substring search that matches few names (a scan of the record);
* RSS: the serving process's peak (``VmHWM``) after all of the above.

Run ``python benchmarks/bench_gateway_scale.py --sizes 10000 100000 1000000``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import httpx
import numpy as np

RECORD = "_h5sidecar.sqlite"


def template(root: Path) -> Path:
    """A DEST indexed from one small granule (its record included)."""
    from h5sidecar.workflows import index_many

    src = root / "src"
    src.mkdir(parents=True)
    with h5py.File(src / "g.h5", "w") as f:
        f.create_dataset("h", data=np.arange(10_000, dtype="f4"), chunks=(1000,),
                         compression="gzip")  # fmt: skip
    dest = root / "template"
    report = index_many(str(src), str(dest), format="json", executor="serial")
    assert report.ok, report.to_dict()
    return dest


def name_of(i: int) -> str:
    return f"{2000 + i // 36_500}/{(i // 100) % 365:03d}/g{i:07d}.h5"


def synthetic(tpl: Path, dest: Path, n: int, files: int) -> None:
    shutil.copytree(tpl, dest)
    db = sqlite3.connect(dest / RECORD)
    cols = [r[1] for r in db.execute("PRAGMA table_info(granules)")]
    first = dict(zip(cols, db.execute("SELECT * FROM granules").fetchone(), strict=True))

    def rows():
        for i in range(n):
            name = name_of(i)
            row = {**first, "url": f"{first['url']}?{i}", "name": name,
                   "sidecar": str(dest / f"{name}.json")}  # fmt: skip
            yield tuple(row[c] for c in cols)

    with db:
        db.executemany(f"INSERT INTO granules ({', '.join(cols)}) VALUES "
                       f"({', '.join('?' * len(cols))})", rows())  # fmt: skip
    db.close()
    for i in range(min(n, files)):
        if i % 50_000 == 0:
            shutil.copy(dest / "g.h5.json", dest / f".links-{i}")
        path = dest / f"{name_of(i)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        os.link(dest / f".links-{i - i % 50_000}", path)


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(code: Path, dest: Path, port: int, n: int, files: int,
            allow: tuple[str, ...] = ()) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    url = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "h5sidecar.cli", "serve", str(dest),
                             "--port", str(port), *(f"--allow={a}" for a in allow)],
                            cwd=code, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    out: dict[str, object] = {"n": n}
    try:
        with httpx.Client(timeout=600) as http:
            while True:
                try:
                    r = http.get(f"{url}/api/granules")
                    break
                except httpx.TransportError:
                    if proc.poll() is not None:
                        raise RuntimeError(proc.stderr.read().decode()[-2000:]) from None
                    time.sleep(0.02)
            out["startup_s"] = time.perf_counter() - t0
            out["first_status"] = r.status_code
            if r.status_code != 200:
                out["error"] = r.text[:200]
                return out
            body = r.json()
            out["listed"] = body.get("count", len(body["granules"]))
            times, nxt = [], f"{url}/api/granules?limit=1000"
            for _ in range(20):
                t = time.perf_counter()
                r = http.get(nxt)
                times.append(time.perf_counter() - t)
                nxt = r.json().get("next")
                if not nxt:
                    break
            out["page_ms"] = 1000 * statistics.median(times)
            names = [name_of(i) for i in np.random.default_rng(0).integers(0, min(n, files), 50)]
            for name in names:  # load each sidecar once
                assert http.get(f"{url}/zarr/{name}/.zgroup").status_code == 200
            hit, miss = [], []
            for name in names:
                t = time.perf_counter()
                assert http.get(f"{url}/zarr/{name}/h/0").status_code == 200
                hit.append(time.perf_counter() - t)
                t = time.perf_counter()
                assert http.get(f"{url}/zarr/9999/{name}/h/0").status_code == 404
                miss.append(time.perf_counter() - t)
            out["lookup_ms"] = 1000 * statistics.median(hit)
            out["miss_ms"] = 1000 * statistics.median(miss)
            t = time.perf_counter()
            r = http.get(f"{url}/api/granules", params={"q": "g0000123.", "limit": 10})
            out["search_ms"] = 1000 * (time.perf_counter() - t)
            out["search_status"] = r.status_code
            out["rss_mb"] = peak_rss(proc.pid) / 2**20
    finally:
        proc.terminate()
        proc.wait(30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--files", type=int, default=100_001, help="granules given a sidecar file")
    ap.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--work", type=Path, default=None, help="where DESTs are built (kept)")
    ap.add_argument("--port", type=int, default=18765)
    ap.add_argument("--allow", action="append", default=[],
                    help="source prefix to allow (a DEST without its record has no report)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gw-scale-"))
    tpl = work / "template" if (work / "template").exists() else template(work)
    for n in args.sizes:
        dest = work / f"dest-{n}-{args.files}"
        if not dest.exists():
            t = time.perf_counter()
            synthetic(tpl, dest, n, args.files)
            print(f"# built {dest.name} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        print(json.dumps(measure(args.code, dest, args.port, n, args.files,
                                 tuple(args.allow))), flush=True)


if __name__ == "__main__":
    main()
