"""Read speed: h5sidecar's readers vs h5py (local, over s3fs), kerchunk and a whole download.

One ATL03-like granule (about ``--size-mb`` MB, shared with the index benchmark) is served by
``s3server.py`` with ``--latency-ms`` of first-byte latency per request and read, in one run:

1. **h5py on the local file** (the floor);
2. **h5py over an s3fs file object**, with s3fs's default cache and with an 8 MiB block cache;
3. **kerchunk** references (``SingleHdf5ToZarr``, JSON on the same endpoint) through plain
   fsspec ``reference://`` + zarr, and + xarray;
4. **h5sidecar** (Parquet sidecar on the same endpoint): fsspec filesystem + zarr's
   ``FsspecStore``, ``SidecarStore``, and the xarray engine;
5. **download + h5py**: the whole object in parallel 8 MiB ranged GETs (obstore), opened by
   h5py in memory.

Every zarr case runs with ``zarr.config.set({"async.concurrency": 128})`` (set once, explicitly).

Workloads: **all** (every variable of the granule, whole) and **science** (``h_ph``,
``lat_ph``, ``lon_ph``, ``delta_time`` of one beam, plus the middle 10% of the photons of every
photon-rate variable of every beam).  Each case runs ``--repeats`` times with caches cleared
(median reported) and every value is checked against h5py's.  Also: opening the whole
hierarchy's metadata from the sidecar (GETs, seconds).

Run with ``python benchmarks/run.py read [--size-mb 300] [--repeats 3] [--only h5sidecar]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from benchmarks import _common as c
from benchmarks._endpoints import ENDPOINTS, endpoint
from benchmarks._read_loops import LOOP_CASES, LOOP_TARGETS
from benchmarks._read_tools import (
    BEAMS,
    CASES,
    FAMILIES,
    OPEN_CASES,
    SCIENCE_BEAM,
    SCIENCE_VARS,
    clear_caches,
    h5py_local,
    kerchunk_xarray,
    prepare,
    warm_up,
)
from benchmarks.s3server import get_stats, reset_stats

README = c.BENCH_DIR / "README.md"
#: zarr's ``async.concurrency`` for every zarr case (zarr 3.1's default is 10)
ZARR_CONCURRENCY = 128
FLOOR = "h5py local (floor)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size-mb", type=float, default=300, help="granule size (default 300)")
    p.add_argument("--repeats", type=int, default=3, help="runs per case (median reported)")
    p.add_argument("--budget-s", type=float, default=60,
                   help="no further runs of a case once its runs took this long (default 60)")
    p.add_argument("--kerchunk-xarray-all", action="store_true",
                   help="also read every variable with kerchunk + xarray (slow: ~20x the bytes)")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--generator", choices=c.GENERATORS, default="atl03",
                   help="granule layout: the package's sample or benchmarks/_granule_alt.py")
    p.add_argument("--endpoint", choices=ENDPOINTS, default="fast",
                   help="S3 endpoint: fast, costly (per-request cost) or moto (see _endpoints)")
    p.add_argument("--only", choices=FAMILIES, action="append", default=None,
                   help="run these tool families only (repeatable; the floor always runs)")
    p.add_argument("--case", action="append", default=None, metavar="TEXT",
                   help="run only the cases whose name contains TEXT (repeatable)")
    p.add_argument("--skip-case", action="append", default=None, metavar="TEXT",
                   help="leave out the cases whose name contains TEXT (repeatable)")
    p.add_argument("--workload", choices=("all", "science"), action="append", default=None,
                   help="run these workloads only (repeatable; default both)")
    p.add_argument("--update-readme", action="store_true",
                   help="write the result tables into benchmarks/README.md")
    p.add_argument("--readme-section", default="read-results", metavar="MARKER",
                   help="the README section --update-readme replaces (default read-results; "
                        "the loop runs use read-loops-70mb-results, read-loops-300mb-results)")
    p.add_argument("--from-results", type=Path, default=None, metavar="JSON",
                   help="do not run: report a saved results file (with --update-readme)")


@dataclass
class ReadMeasurement:
    """Wall and CPU times of repeated runs of one (tool, workload), with what it moved."""

    case: str
    workload: str
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    requests: int | None = None
    bytes: int | None = None
    in_a_row: int | None = None  # the most requests one after another (server's counter)
    unreadable: int = 0  # arrays the tool could not read (kerchunk + zarr 3 only)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"median_s": statistics.median(self.times),
                               "median_cpu_s": statistics.median(self.cpu)}


# ---------------------------------------------------------------------------- workloads

def workloads(path: Path) -> dict[str, list[tuple[str, slice | None]]]:
    """``{workload: [(array path, photon slice or None for the whole array)]}``."""
    every: list[str] = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: every.append(name)
                     if isinstance(obj, h5py.Dataset) else None)
        science: list[tuple[str, slice | None]] = []
        for beam in BEAMS:
            heights = f[f"{beam}/heights"]
            n = heights["h_ph"].shape[0]
            tenth = slice(int(n * 0.45), int(n * 0.55))
            for name, ds in heights.items():
                if ds.shape[:1] != (n,):  # photon-rate variables only
                    continue
                whole = beam == SCIENCE_BEAM and name in SCIENCE_VARS
                science.append((f"{beam}/heights/{name}", None if whole else tenth))
    return {"all": [(p, None) for p in every], "science": science}


def needed_bytes(refs: Any, items: list[tuple[str, slice | None]]) -> int:
    """Stored (compressed) bytes of the chunks a selection touches: what any reader must move."""
    total = 0
    for path, sel in items:
        arr = refs.arrays[path]
        lengths = arr.manifest.lengths.reshape(-1)
        if sel is None:
            total += int(lengths.sum())
            continue
        rows = arr.meta.chunks[0]
        first, last = sel.start // rows, (sel.stop - 1) // rows
        total += int(lengths[first:last + 1].sum())  # 1-D photon arrays: chunk i = rows i*n...
    return total


def check(case: str, got: dict[str, Any], want: dict[str, np.ndarray],
          unreadable: dict[str, str]) -> None:
    """Every value must equal h5py's (an assertion of the benchmark, not of a test); only
    kerchunk cases may leave out arrays zarr could not decode (reported, not hidden)."""
    missing = set(want) - set(got) - (set(unreadable) if case.startswith("kerchunk") else set())
    assert not missing, f"{case}: {len(missing)} arrays not read, e.g. {sorted(missing)[:3]}"
    for key, raw in want.items():
        if key not in got:
            continue
        val, ref = np.asarray(got[key]), np.asarray(raw)  # h5py gives a str scalar as bytes
        assert val.shape == ref.shape, f"{case}: {key} shape {val.shape} != h5py {ref.shape}"
        kinds = {ref.dtype.kind, val.dtype.kind}
        if kinds <= set("OSUT") and (len(kinds) > 1 or "O" in kinds):
            # variable-length strings: bytes from h5py, str (object, unicode, StringDType) from readers
            val, ref = _text(val), _text(ref)
        nan = ref.dtype.kind in "fc"
        assert np.array_equal(val, ref, equal_nan=nan), f"{case}: {key} differs from h5py"


def _text(a: np.ndarray) -> np.ndarray:
    """Variable-length strings as ``str`` whether a reader gives bytes or str."""
    return np.vectorize(lambda x: x.decode() if isinstance(x, bytes) else x, otypes=[object])(a)


# ---------------------------------------------------------------------------- measuring

def measure(case: str, workload: str, fn: Callable[[], dict[str, Any]], repeats: int,
            budget: float,
            url: str | None, want: dict[str, np.ndarray] | None,
            unreadable: dict[str, str] | None = None) -> tuple[ReadMeasurement, Any]:
    """Run ``fn`` ``repeats`` times, each from cold caches; the first run's I/O is reported
    (S3: the server's counters; local: ``/proc/self/io``)."""
    m = ReadMeasurement(case, workload)
    out: Any = None
    for i in range(repeats):
        if sum(m.times) > budget:  # slow cases: fewer runs keep the whole benchmark bounded
            break
        clear_caches()
        out = None
        gc.collect()
        with c.local_io() as io:
            if url and i == 0:
                reset_stats(url)
            c0, t0 = time.process_time(), time.perf_counter()
            out = fn()
            m.times.append(time.perf_counter() - t0)
            m.cpu.append(time.process_time() - c0)
        if i == 0:
            if url:
                stats = get_stats(url)
                m.requests, m.bytes = int(stats["requests"]), int(stats["bytes_out"])  # type: ignore[arg-type]
                m.in_a_row = int(stats["in_a_row"])  # type: ignore[arg-type]
            else:
                m.requests, m.bytes = io["requests"], io["bytes"]
        if want is not None:
            check(case, out, want, unreadable or {})
            m.unreadable = len(set(want) - set(out))
    print(f"  {workload:8s} {case:34s} median {statistics.median(m.times):7.2f} s  cpu "
          f"{statistics.median(m.cpu):6.2f} s  runs {[round(t, 2) for t in m.times]}  "
          f"requests {m.requests}  in a row {m.in_a_row}  bytes {c.fmt_bytes(m.bytes)}", flush=True)
    return m, out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import zarr

    # The README's one explicit call for whole-array reads through zarr, made once for every
    # zarr case alike (kerchunk's and h5sidecar's); stores no longer make it behind our back.
    zarr.config.set({"async.concurrency": ZARR_CONCURRENCY})
    granule = c.sample_granule(args.size_mb, args.generator)
    size = granule.stat().st_size
    print(f"granule {granule.name}: {c.fmt_bytes(size)}", flush=True)
    families = args.only or list(FAMILIES)
    chosen = args.workload or ["all", "science"]
    loads = {k: v for k, v in workloads(granule).items() if k in chosen}
    with endpoint(args.endpoint, args.latency_ms) as ep:
        ep.publish(granule)
        url = ep.url
        env = prepare(granule, url, need_kerchunk="kerchunk" in families, publish=ep.publish,
                      refs_tag="-moto" if args.endpoint == "moto" else "")
        warm_up(env, loads[chosen[0]][:2], families)
        results: list[ReadMeasurement] = []
        needed = {}
        for workload, items in loads.items():
            needed[workload] = needed_bytes(env.refs, items)
            m, want = measure(FLOOR, workload, lambda items=items: h5py_local(env, items),
                              args.repeats, args.budget_s, None, None)
            results.append(m)
            whole = {fn for _, _, fn in LOOP_CASES}
            for case, family, fn in CASES + LOOP_CASES:
                if family not in families or (fn is kerchunk_xarray and workload == "all"
                                               and not args.kerchunk_xarray_all):
                    continue
                if fn in whole and workload != "all":  # they load whole groups
                    continue
                if args.case and not any(t in case for t in args.case):
                    continue
                if args.skip_case and any(t in case for t in args.skip_case):
                    continue
                m, _ = measure(case, workload, lambda fn=fn, items=items: fn(env, items),
                               args.repeats, args.budget_s, url, want, env.failed)
                results.append(m)
            del want
        opens = [measure(name, "open metadata", lambda fn=fn: fn(env), args.repeats,
                         args.budget_s, url, None)[0]
                 for name, family, fn in OPEN_CASES if family in families]
    return {"benchmark": "read", "env": c.environment(), "args": vars(args),
            "endpoint": ep.describe(),
            "zarr_async_concurrency": zarr.config.get("async.concurrency"),
            "granule": {"name": granule.name, "bytes": size,
                        "arrays": {k: len(v) for k, v in loads.items()}},
            "needed_bytes": needed, "kerchunk_unreadable": env.failed, "measurements": [m.to_dict() for m in results],
            "open": [m.to_dict() for m in opens]}


# ---------------------------------------------------------------------------- reporting

def report(results: dict[str, Any]) -> str:
    """Markdown: per workload, every tool with ratios to the floor; then the metadata opens
    and the targets."""
    g, env = results["granule"], results["env"]
    out = [f"Granule: `{g['name']}`, {c.fmt_bytes(g['bytes'])}; workloads: "
           + ", ".join(f"{k} ({v} arrays or slices, {c.fmt_bytes(results['needed_bytes'][k])} "
                       "of chunks needed)" for k, v in g["arrays"].items())
           + f"; generator {results['args'].get('generator', 'atl03')}; S3 endpoint "
           f"{results.get('endpoint', 'fast (s3server.py)')}, latency "
           f"{results['args']['latency_ms']:g} ms; {env['cpus']} CPUs, load "
           f"average {env['load_avg'][0]:.1f} at the end; code {env.get('commit') or 'unknown'}; "
           f"{env['when']}.", ""]
    by = {(m["workload"], m["case"]): m for m in results["measurements"]}
    for workload in g["arrays"]:
        floor = by[(workload, FLOOR)]
        rows = []
        for (w, case), m in by.items():
            if w != workload:
                continue
            label = case + (f" ({m['unreadable']} arrays unreadable)" if m.get("unreadable")
                            else "")
            rows.append((label, f"{m['median_s']:.2f}", f"{m['median_s'] / floor['median_s']:.2f}",
                         m["requests"],
                         m["in_a_row"] if m.get("in_a_row") is not None else "-",
                         c.fmt_bytes(m["bytes"]),
                         f"{m['bytes'] / floor['bytes']:.2f}" if case != FLOOR else "1.00",
                         f"{m['median_cpu_s']:.2f}",
                         f"{m['median_cpu_s'] / floor['median_cpu_s']:.2f}"))
        out += [(f"**Workload {workload}** (median of {len(floor['times'])} runs; the floor's "
                 "requests and bytes are read syscalls and bytes read, page cache included)"), "",
                c.markdown_table(["tool", "s", "x floor", "requests", "in a row", "bytes moved",
                                  "bytes x floor", "CPU s", "CPU x floor"], rows), ""]
    out += ["**Opening the whole hierarchy's metadata** (every group and array, no data)", "",
            c.markdown_table(["from", "GETs", "bytes", "median s"],
                             [(m["case"], m["requests"], c.fmt_bytes(m["bytes"]),
                               f"{m['median_s']:.3f}") for m in results["open"]]), ""]
    out += ["Targets:", "", *targets(results)]
    return "\n".join(out)


def targets(results: dict[str, Any]) -> list[str]:
    by = {(m["workload"], m["case"]): m for m in results["measurements"]}
    lines = []
    ours = list(dict.fromkeys(case for (_, case) in by if case.startswith("h5sidecar")))
    sidecar = next((m["bytes"] for m in results["open"] if m["case"].startswith("h5sidecar")), 0)
    for workload in ("all", "science"):
        floor = by.get((workload, FLOOR))
        mine = [by[(workload, k)] for k in ours if (workload, k) in by]
        if not floor or not mine:
            continue
        best = min(mine, key=lambda m: m["median_s"])
        if workload == "all":
            r = best["median_s"] / floor["median_s"]
            lines.append(f"- all, at most 1.1x the floor: best h5sidecar ({best['case']}) "
                         f"{r:.2f}x -> {'met' if r <= 1.1 else 'MISSED'}")
            for case, limit in LOOP_TARGETS.items():
                if (workload, case) in by:
                    r = by[(workload, case)]["median_s"] / floor["median_s"]
                    lines.append(f"- all, {case.removeprefix('h5sidecar: ')} at most {limit}x "
                                 f"the floor: {r:.2f}x -> {'met' if r <= limit else 'MISSED'}")
            continue
        peers = [by[(workload, k)] for (w, k) in by if w == workload and
                 k.startswith(("h5py + s3fs", "download"))]
        need = results["needed_bytes"][workload]
        if peers:
            peer = min(peers, key=lambda m: m["median_s"])
            speed = peer["median_s"] / best["median_s"]
            lines.append(f"- science, at least 5x faster than the best of h5py+s3fs and "
                         f"download ({peer['case']}, {peer['median_s']:.2f} s): best h5sidecar "
                         f"({best['case']}) {speed:.2f}x -> {'met' if speed >= 5 else 'MISSED'}")
        for m in mine:
            r, chunks_only = m["bytes"] / need, (m["bytes"] - sidecar) / need
            lines.append(f"- science, moving at most 1.2x the needed bytes: {m['case']} "
                         f"{r:.2f}x -> {'met' if r <= 1.2 else 'MISSED'} ({chunks_only:.2f}x "
                         f"without the {c.fmt_bytes(sidecar)} of the sidecar itself)")
    for m in results["open"]:
        if m["case"].startswith("h5sidecar"):
            ok = m["requests"] <= 2 and m["median_s"] < 0.3
            lines.append(f"- open metadata in 1-2 GETs and under 0.3 s: {m['case']} "
                         f"{m['requests']} GETs, {m['median_s']:.3f} s -> "
                         f"{'met' if ok else 'MISSED'}")
    return lines


def main(args: argparse.Namespace) -> dict[str, Any]:
    update, args.update_readme = args.update_readme, False  # our section, see --readme-section
    results = c.main_for("read", args, run, report, README)
    if update:
        c.replace_section(README, args.readme_section, report(results))
        print(f"updated {README} ({args.readme_section})")
    return results

