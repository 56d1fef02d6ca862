"""A cube appended to from an object-store DEST: what a day's append asks of the store.

N daily granules are indexed into a DEST on the project's S3 endpoint (``s3server.py``, no
latency for the setup) and built into a local Parquet cube; then one more day is indexed and
appended, on a copy of the cube, through the same endpoint with ``--latency-ms`` a request.
Each measured append runs in its own process (wall time, the endpoint's request counter), with
a copy of the record cache the setup filled (a machine that appends daily keeps it), for each
code tree given (``--code``: the repository by default; another checkout to compare with).

    python -m benchmarks.bench_cube_s3dest --days 200 --latency-ms 20 --code . /tmp/before

``--cube-on-s3``: the cube is on the endpoint too (``s3://cubedest/cube.parq``), so the append
writes to the object store; ``--replace``: one member re-processed before the append (a
member replaced, besides the new day); ``--longer``: that member re-processed with a second
time step (another length: the chunks after it are renumbered, so the cube is rewritten).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import _common as c
from benchmarks._cube_peers import S3
from benchmarks.s3server import get_stats, reset_stats, start_server

BUCKET = "cubedest"
START = dt.date(2020, 1, 1)

_APPEND = """
import json, os, sys, time
from h5sidecar.settings import RecordSettings
from h5sidecar.workflows import build_cube
dest, cube, cache = sys.argv[1:4]
try:
    settings = RecordSettings(cache, record_mark_margin_s=float(sys.argv[4]))
except TypeError:  # code from before the object-store mark
    settings = RecordSettings(cache)
t = time.perf_counter()
r = build_cube(dest, cube, mode="append", record_settings=settings)
import h5sidecar
print(json.dumps({"seconds": time.perf_counter() - t, "added": len(r.added),
                  "replaced": len(r.replaced),
                  "code": os.path.dirname(os.path.dirname(h5sidecar.__file__)),
                  "members": len(r.cubes[0].granules), "written": r.written}))
"""


def _second_step(path: Path) -> None:
    """``path`` (a daily granule) given a second time step, six hours after its first (before
    the next day's), with the first's values."""
    import netCDF4

    with netCDF4.Dataset(path, "a") as nc:
        nc["time"][1] = nc["time"][0] + 0.25
        for name in ("tas", "pr"):
            var = nc[name]
            var.set_auto_maskandscale(False)
            var[1] = var[0]


def _env(url: str) -> dict[str, str]:
    env = {**os.environ, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": S3["key"],
           "AWS_SECRET_ACCESS_KEY": S3["secret"], "AWS_DEFAULT_REGION": S3["region"]}
    env.pop("AWS_SESSION_TOKEN", None)
    return env


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--days", type=int, default=200, help="granules in DEST (default 200)")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--margin", type=float, default=0.0,
                   help="record_mark_margin_s of the appends (default 0: DEST was indexed "
                        "seconds before, where a daily append finds yesterday's rows hours old)")
    p.add_argument("--cube-on-s3", action="store_true",
                   help="build and append to the cube on the endpoint, not on local disk")
    p.add_argument("--replace", action="store_true",
                   help="re-process the middle member too: the append replaces it")
    p.add_argument("--longer", action="store_true",
                   help="with --replace: the re-processed member has two time steps")
    p.add_argument("--code", nargs="+", default=["."],
                   help="code trees to run the append with (PYTHONPATH), side by side")
    args = p.parse_args(argv)

    from h5sidecar.sample import write_daily_granule
    from h5sidecar.settings import RecordSettings
    from h5sidecar.workflows import build_cube, index_many

    root = c.S3_ROOT / BUCKET
    shutil.rmtree(root, ignore_errors=True)
    src = root / "src"
    src.mkdir(parents=True)
    for k in range(args.days):
        write_daily_granule(src / f"tas_{k:05d}.nc", START + dt.timedelta(days=k))
    work = Path(tempfile.mkdtemp(prefix="bench-cube-s3dest-"))
    fast, stop_fast = start_server(c.S3_ROOT)
    slow, stop_slow = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
    os.environ.update(_env(fast))
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    dest = f"s3://{BUCKET}/dest"
    cache = work / "cache"
    try:
        settings = RecordSettings(str(cache))
        report = index_many(f"s3://{BUCKET}/src", dest, executor="serial",
                            record_settings=settings)
        assert report.ok, report.to_dict()
        cube = root / "cube.parq" if args.cube_on_s3 else work / "cube.parq"
        build_cube(dest, f"s3://{BUCKET}/cube.parq" if args.cube_on_s3 else str(cube),
                   record_settings=settings)
        write_daily_granule(src / f"tas_{args.days:05d}.nc",
                            START + dt.timedelta(days=args.days))
        if args.replace:  # re-processed: another seed, the same day
            mid = args.days // 2
            write_daily_granule(src / f"tas_{mid:05d}.nc", START + dt.timedelta(days=mid),
                                seed=7)
            if args.longer:
                _second_step(src / f"tas_{mid:05d}.nc")
        s3fs.S3FileSystem.clear_instance_cache()
        report = index_many(f"s3://{BUCKET}/src", dest, executor="serial",
                            record_settings=settings)
        assert report.ok, report.to_dict()
        rows: dict[str, list[dict[str, object]]] = {}
        for _ in range(args.repeats):
            for code in args.code:
                run = work / "run"
                shutil.rmtree(run, ignore_errors=True)
                target = root / "run.parq" if args.cube_on_s3 else run / "cube.parq"
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(cube, target)
                shutil.copytree(cache, run / "cache")
                reset_stats(slow)
                out = subprocess.run(
                    [sys.executable, "-c", _APPEND, dest,
                     f"s3://{BUCKET}/run.parq" if args.cube_on_s3 else str(target),
                     str(run / "cache"), str(args.margin)], env={**_env(slow), "PYTHONPATH": os.path.abspath(code)},
                    capture_output=True, text=True, check=True, cwd=work)  # (not this tree)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                stats = get_stats(slow)
                got.update(requests=stats["requests"], ops=stats.get("ops"),
                           in_a_row=stats.get("in_a_row"))
                rows.setdefault(code, []).append(got)
        where = "a cube on the endpoint" if args.cube_on_s3 else "a local cube"
        what = ("1 day and 1 member replaced" + (" by 2 steps" if args.longer else "")
                if args.replace else "1 day")
        print(f"append {what} to {where} of {args.days} from {dest}, "
              f"{args.latency_ms:g} ms a request (median of {args.repeats}):")
        for code, runs in rows.items():
            t = statistics.median(float(r["seconds"]) for r in runs)  # type: ignore[arg-type]
            print(f"  {code} ({runs[0]['code']}): {t:.3f} s, {runs[0]['requests']} requests "
                  f"({runs[0]['in_a_row']} in a row), added {runs[0]['added']}, "
                  f"replaced {runs[0]['replaced']}, "
                  f"members {runs[0]['members']}, {runs[0]['written']}; ops {runs[0]['ops']}")
    finally:
        stop_fast()
        stop_slow()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
