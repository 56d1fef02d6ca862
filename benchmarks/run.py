"""Run h5sidecar's benchmarks: ``python benchmarks/run.py BENCHMARK [options]``.

Each benchmark is a module in this folder with ``add_arguments(parser)`` and ``main(args)``;
register new ones in :data:`BENCHMARKS`.  Without a benchmark name, every registered benchmark
runs with its defaults.  Results go to ``benchmarks/results/<name>-<time>.json``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

# run as a script from anywhere: make the repository importable (benchmarks is a package)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: benchmark name -> (module in benchmarks/, one-line description)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "index": ("benchmarks.bench_index", "index speed and sidecar size: h5sidecar vs kerchunk"),
    "layouts": ("benchmarks.bench_layouts",
                "sidecar layouts: objects, bytes, PUTs, write and open time per granule"),
    "read": ("benchmarks.bench_read", "read speed: h5sidecar vs h5py, s3fs, kerchunk, download"),
    "gateway": ("benchmarks.bench_gateway", "HTTP gateway: random chunks under load, full reads"),
    "workflows": ("benchmarks.bench_workflows",
                  "batch indexing on Dask (granules/s) vs kerchunk; analysis vs h5py + s3fs"),
    "cube": ("benchmarks.bench_cube",
             "datacube: build from sidecars vs kerchunk from HDF5; open, time series, time step"),
    "scale": ("benchmarks.bench_scale",
              "every command at 10k-1M synthetic granules: time, peak RSS, growth with N"),
    "dmrpp": ("benchmarks.bench_dmrpp",
              "indexing from DMR++ (index_dmrpp) vs from HDF5 over the S3 endpoint"),
    "subchunk": ("benchmarks.bench_subchunk",
                 "NSRDB-like time step / site series: h5py, s3fs, kerchunk, read_arrays, gateway"),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/run.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="benchmark")
    for name, (module, help_text) in BENCHMARKS.items():
        bp = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module).add_arguments(bp)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    names = [args.benchmark] if args.benchmark else list(BENCHMARKS)
    for name in names:
        sub_args = args if args.benchmark else p.parse_args([name])
        importlib.import_module(BENCHMARKS[name][0]).main(sub_args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
