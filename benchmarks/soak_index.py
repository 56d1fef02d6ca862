"""Soak: index a batch of corrupt granules over the local S3 endpoint; nothing may hang.

Each case is a bit-flipped copy of the ATL03-like sample granule (every 2048th byte inverted in
a few 64 KiB windows of the first 1.5 MB, one seed per case), served by ``s3server.py`` with a
first-byte latency, and indexed by ``index_one`` (what a batch worker runs) in its own process,
so that a hang is seen as one (killed after ``--timeout`` seconds) and a crash of the HDF5
library costs only its case.

A case *held* when it ended with a clean result before the timeout: ``ok`` (the flips hit only
values), or ``failed`` with a specific kind.  It *failed* on a hang, a crash (``worker_crashed``)
or the kind ``bug``.  Reported: cases tried / held / failed, the kinds, the peak RSS of one case,
and the longest time to a clean error.  Each case runs under the memory limit of a batch worker
(``IndexSettings.max_worker_memory``, ``RLIMIT_DATA``).

Usage::

    python benchmarks/soak_index.py [--cases 40] [--photons 20000] [--latency-ms 5] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __package__:
    from benchmarks.s3server import start_server
else:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.s3server import start_server
from h5sidecar.sample import flip_bits

BUCKET = "soak"

#: Run in a child per case: index one granule, print its result and the peak RSS as JSON.
_CASE = """
import json, resource, sys, time
from h5sidecar.settings import IndexSettings
from h5sidecar.workflows.index._executors import Task, run_tasks
limit = IndexSettings().max_worker_memory  # what a batch worker process runs under
resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
from h5sidecar.workflows.index._index_one import IndexOptions, index_one
url, sidecar, endpoint = sys.argv[1:4]
options = IndexOptions(format="json", storage_options={"endpoint_url": endpoint})
t0 = time.monotonic()
[r] = run_tasks(index_one, [Task(url, sidecar, (url, sidecar, options, None))], "serial", workers=1)
print(json.dumps({"status": r.status, "kind": r.error.kind if r.error else "",
                  "message": r.error.message[:200] if r.error else "",
                  "seconds": time.monotonic() - t0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""




def run_case(name: str, endpoint: str, out: Path, timeout: float) -> dict[str, object]:
    """Index ``s3://soak/<name>`` in a child process; its result, or a hang/crash record."""
    cmd = [sys.executable, "-c", _CASE, f"s3://{BUCKET}/{name}", str(out / f"{name}.json"),
           endpoint]
    env = {"AWS_ACCESS_KEY_ID": "soak", "AWS_SECRET_ACCESS_KEY": "soak",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
           "PATH": "/usr/bin:/bin"}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"case": name, "status": "hang", "kind": "hang", "seconds": timeout}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"case": name, "status": "failed", "kind": "worker_crashed",
                "seconds": time.monotonic() - t0, "message": f"exit {proc.returncode}"}
    return {"case": name, **json.loads(lines[-1])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--photons", type=int, default=20_000)
    ap.add_argument("--latency-ms", type=float, default=5.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a case hangs")
    args = ap.parse_args()
    from h5sidecar.sample import write_atl03_like

    with tempfile.TemporaryDirectory() as tmp:
        root, out = Path(tmp) / "s3", Path(tmp) / "out"
        (root / BUCKET).mkdir(parents=True)
        out.mkdir()
        good = write_atl03_like(Path(tmp) / "good.h5", photons=args.photons).read_bytes()
        names = [f"bad{seed:03d}.h5" for seed in range(args.cases)]
        for seed, name in enumerate(names):
            (root / BUCKET / name).write_bytes(flip_bits(good, seed))
        endpoint, stop = start_server(root, latency_ms=args.latency_ms)
        t0 = time.monotonic()
        try:
            with ThreadPoolExecutor(args.jobs) as pool:
                results = list(pool.map(lambda n: run_case(n, endpoint, out, args.timeout), names))
        finally:
            stop()
        wall = time.monotonic() - t0
    bad = [r for r in results if r["kind"] in ("hang", "worker_crashed", "bug")]
    clean = [r for r in results if r["status"] == "failed" and r not in bad]
    print(f"granule {len(good)} bytes, {args.cases} cases, {args.jobs} at a time, "
          f"latency {args.latency_ms:g} ms, {wall:.0f} s in all")
    print(f"tried {len(results)}, held {len(results) - len(bad)}, failed {len(bad)}")
    print("outcomes:", dict(Counter(f"{r['status']}:{r['kind']}" if r["kind"] else r["status"]
                                    for r in results)))
    top = max(results, key=lambda r: float(r.get("rss_mb", 0)))  # type: ignore[arg-type]
    print(f"peak RSS of one case: {float(top.get('rss_mb', 0)):.0f} MB ({top['case']}); "
          f"longest case: {max(float(r['seconds']) for r in results):.1f} s")  # type: ignore[arg-type]
    if clean:
        slowest = max(clean, key=lambda r: float(r["seconds"]))  # type: ignore[arg-type]
        print(f"longest time to a clean error: {float(slowest['seconds']):.1f} s "
              f"({slowest['case']}: {slowest['kind']})")
    for r in bad:
        print(f"  {r['case']}: {r['kind']} {r.get('message', '')}")
    return 1 if any(r["kind"] == "hang" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
