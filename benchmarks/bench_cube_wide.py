"""A wide cube: many variables, one of them read.  What its open and a time step cost.

N daily netCDF-4 granules of V gridded variables (one ``(1, 8, 12)`` chunk each, gzip) are
indexed and built into a local Parquet cube of N x V chunk references.  Then, in a fresh
process for each code tree given (``--code``: the repository by default; another checkout to
compare with), and ``--repeats`` times alternating: ``xr.open_dataset(cube,
engine="h5sidecar", decode_times=False)``, and the first and last time steps of one variable,
checked against h5py's read of the same granules.  Reported: the open's and the read's wall
time, CPU and peak RSS (the median run's).

    python -m benchmarks.bench_cube_wide --granules 10000 --variables 30 --code . /tmp/before
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

START = dt.date(2000, 1, 1)

_READ = """
import json, resource, sys, time
import h5py, numpy as np, xarray as xr
cube, var, first, last = sys.argv[1:5]
t = time.perf_counter(); c = time.process_time()
ds = xr.open_dataset(cube, engine="h5sidecar", chunks=None, decode_times=False)
t_open, c_open = time.perf_counter() - t, time.process_time() - c
t = time.perf_counter()
got = ds[var].isel(time=-1).values, ds[var].isel(time=0).values
t_read = time.perf_counter() - t
for path, value in zip((last, first), got):
    with h5py.File(path) as f:
        raw = f[var][0]
    assert np.array_equal(value, raw, equal_nan=True), path
import h5sidecar, os
print(json.dumps({"open": t_open, "open_cpu": c_open, "read": t_read,
                  "cpu": time.process_time() - c,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                  "code": os.path.dirname(os.path.dirname(h5sidecar.__file__))}))
"""


def write_granule(path: Path, day: dt.date, variables: int) -> None:
    """One daily granule of ``variables`` float32 grids named ``v00``, ``v01``, ..."""
    import netCDF4
    import numpy as np

    rng = np.random.default_rng((day - START).days)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", 8)
        nc.createDimension("lon", 12)
        t = nc.createVariable("time", "f8", ("time",), chunksizes=(1,))
        t.setncatts({"units": "days since 2000-01-01", "calendar": "standard", "axis": "T"})
        t[:] = [(day - START).days + 0.5]
        for name, n in (("lat", 8), ("lon", 12)):
            nc.createVariable(name, "f4", (name,))[:] = np.arange(n, dtype="f4")
        for k in range(variables):
            v = nc.createVariable(f"v{k:02d}", "f4", ("time", "lat", "lon"), zlib=True,
                                  chunksizes=(1, 8, 12))
            v[:] = rng.normal(size=(1, 8, 12)).astype("f4")


def setup(work: Path, granules: int, variables: int) -> tuple[Path, list[Path]]:
    """The granules, their sidecars and the cube (kept in ``work`` for later runs)."""
    src, dest, cube = work / "src", work / "dest", work / "cube.parq"
    files = [src / f"wide_{(START + dt.timedelta(days=i)).isoformat()}.nc"
             for i in range(granules)]
    if not cube.exists():
        src.mkdir(parents=True, exist_ok=True)
        for i, f in enumerate(files):
            if not f.exists():
                write_granule(f, START + dt.timedelta(days=i), variables)
        cli = [sys.executable, "-m", "h5sidecar.cli"]
        subprocess.run([*cli, "index", str(src), "-o", str(dest), "--format", "json"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([*cli, "cube", str(dest), "-o", str(cube)], check=True,
                       stdout=subprocess.DEVNULL)
    return cube, files


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--granules", type=int, default=10_000)
    p.add_argument("--variables", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--work", type=Path, default=Path("/tmp/h5sidecar-bench-wide"))
    p.add_argument("--code", nargs="+", default=["."],
                   help="code trees to compare (each put first on PYTHONPATH)")
    a = p.parse_args(argv)
    cube, files = setup(a.work, a.granules, a.variables)
    runs: dict[str, list[dict]] = {c: [] for c in a.code}
    for _ in range(a.repeats):
        for code in a.code:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(code)}
            var = f"v{a.variables // 2:02d}"
            out = subprocess.run([sys.executable, "-c", _READ, str(cube), var,
                                  str(files[0]), str(files[-1])],
                                 env=env, cwd="/tmp", capture_output=True, text=True, check=True)
            runs[code].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{a.granules} granules x {a.variables} variables "
          f"({a.granules * a.variables:,} chunk references), median of {a.repeats}:")
    print("| code | open | open CPU | two time steps | CPU | peak RSS |")
    print("|---|---:|---:|---:|---:|---:|")
    for code, rs in runs.items():
        mid = sorted(rs, key=lambda r: r["cpu"])[len(rs) // 2]
        spread = f"{min(r['rss_mb'] for r in rs)}-{max(r['rss_mb'] for r in rs)}"
        print(f"| {code} | {statistics.median(r['open'] for r in rs):.2f} s "
              f"| {mid['open_cpu']:.2f} s | {statistics.median(r['read'] for r in rs):.2f} s "
              f"| {mid['cpu']:.2f} s | {spread} MB |")


if __name__ == "__main__":
    main()
