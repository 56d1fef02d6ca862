"""The record of an object-store DEST at N granules: what a run touching one granule costs.

DEST ``s3://b/dest`` on the local S3 endpoint (``benchmarks/s3server.py``, no latency) starts
with a run report of N synthetic granules (rows of one real granule's result under other
names, in another source root so none is an orphan), as an earlier version wrote it
(``_report.json``).  Then, each in a fresh process (``h5sidecar index``/``report``; wall time,
peak RSS of that process, PUT requests and bytes received by the endpoint):

- ``first``: index ``s3://b/src`` (one granule, new) into DEST (with the parts record this
  run also migrates ``_report.json``);
- ``touch1``: the granule replaced (new ETag), indexed again;
- ``noop``: nothing changed;
- ``export``: ``h5sidecar report DEST --json`` (the whole document, to ``/dev/null``).

The record's local cache (``H5SIDECAR_RECORD_CACHE``) is a fresh folder under the work folder,
so ``first`` fills it and the later steps find it.

    python -m benchmarks.bench_s3record --n 10000 100000 --work /tmp/s3rec
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks.s3server import get_stats, reset_stats, start_server

ROOT = Path(__file__).resolve().parents[1]


def _report_doc(n: int, template: dict[str, Any]) -> dict[str, Any]:
    granules = []
    for i in range(n):
        name = f"old/granule_{i:07d}.nc"
        g = dict(template, name=name, url=f"s3://b/other/{name}",
                 sidecar=f"s3://b/dest/{name}.parq")
        g["source"] = dict(template["source"], url=g["url"])
        granules.append(g)
    return {"report_version": 1, "h5sidecar_version": "0", "source": "s3://b/other",
            "dest": "s3://b/dest", "format": "parquet", "options": {}, "started":
            "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:00:00+00:00", "seconds": 1.0,
            "complete": True, "roots": ["s3://b/other"], "carried_over": 0, "orphaned": [],
            "counts": {"ok": n, "failed": 0, "up_to_date": 0}, "granules": granules}


def _measured(argv: list[str], url: str, out: Any = subprocess.DEVNULL,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    reset_stats(url)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{argv} failed ({proc.returncode}): {err[-2000:]}")
    stats = get_stats(url)
    ops = stats.get("ops", {})
    assert isinstance(ops, dict)
    puts = sum(v for k, v in ops.items() if "put" in k.lower())
    return {"seconds": round(seconds, 2), "rss_mb": round(usage.ru_maxrss / 1024),
            "puts": puts, "bytes_in": stats.get("bytes_in"), "bytes_out": stats.get("bytes_out"),
            "ops": ops}


def run_size(n: int, work: Path) -> dict[str, Any]:
    """Measure the four commands at ``n`` recorded granules."""
    from h5sidecar.sample import write_daily_granule

    data = work / f"n{n}"
    shutil.rmtree(data, ignore_errors=True)
    (data / "b" / "src").mkdir(parents=True)
    (data / "b" / "dest").mkdir(parents=True)
    write_daily_granule(data / "b" / "src" / "G.nc", date(2020, 1, 1))
    url, stop = start_server(data)
    try:
        so = ["--storage-option", f"endpoint_url={url}", "--storage-option", "key=x",
              "--storage-option", "secret=y"]
        index = [sys.executable, "-m", "h5sidecar.cli", "index", "s3://b/src", "-o",
                 "s3://b/dest", "--workers", "1", *so]
        template = {"status": "ok", "source": {"url": "", "size": 1000, "etag": "abc",
                                               "mtime": None},
                    "variables": {"virtual": 3, "inlined": 2, "skipped": 0}, "skipped": [],
                    "n_chunks": 7, "sidecar_bytes": 5000, "seconds": {"total": 0.1},
                    "error": None, "partial": False}
        (data / "b" / "dest" / "_report.json").write_text(json.dumps(_report_doc(n, template)))
        # the record's local cache (where the version has one): empty at the start
        env = {**os.environ, "H5SIDECAR_RECORD_CACHE": str(data / "cache")}
        out: dict[str, Any] = {"first": _measured(index, url, env=env)}
        write_daily_granule(data / "b" / "src" / "G.nc", date(2020, 1, 2))
        out["touch1"] = _measured(index, url, env=env)
        out["noop"] = _measured(index, url, env=env)
        with open(os.devnull, "w") as null:
            out["export"] = _measured([sys.executable, "-m", "h5sidecar.cli", "report",
                                       "s3://b/dest", "--json", *so], url, out=null, env=env)
        files = [p for p in (data / "b" / "dest").rglob("*") if p.is_file()
                 and ("_report" in p.name or "_h5sidecar_record" in str(p))]
        out["record_files"] = {str(p.relative_to(data / "b" / "dest")): p.stat().st_size
                               for p in files}
        return out
    finally:
        stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    p.add_argument("--work", type=Path, default=Path("/tmp/bench_s3record"))
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results = {n: run_size(n, args.work) for n in args.n}
    for n, r in results.items():
        for step in ("first", "touch1", "noop", "export"):
            m = r[step]
            print(f"{n:>8} {step:<7} {m['seconds']:>7} s {m['rss_mb']:>6} MB "
                  f"{m['puts']:>4} PUT {m['bytes_in']:>12} B in {m['bytes_out']:>12} B out")
        print(f"{n:>8} record files: {r['record_files']}")


if __name__ == "__main__":
    main()
