"""Index speed: h5sidecar's indexer vs kerchunk's SingleHdf5ToZarr on an ATL03-like granule.

Both index the same granule (about ``--size-mb`` MB, written once into ``benchmarks/data/``),
locally and through the local S3 endpoint with ``--latency-ms`` of first-byte latency per
request.  Reported per case: the median wall time of ``--repeats`` runs, the requests and bytes
it moved (S3: the server's counters; local: read syscalls and bytes read from
``/proc/self/io``), and the floors: reading every byte of the file, one full h5py read of every
dataset, and one whole-object GET.  Then the sidecar sizes: kerchunk JSON and kerchunk Parquet
(``kerchunk.df.refs_to_dataframe``) against h5sidecar's ``write_json`` / ``write_parquet``.

Run with ``python benchmarks/run.py index [--size-mb 300] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from benchmarks import _common as c
from benchmarks._endpoints import ENDPOINTS, Endpoint, endpoint
from benchmarks.s3server import get_stats, reset_stats

README = c.BENCH_DIR / "README.md"
META_KEYS = (".zarray", ".zattrs", ".zgroup", ".zmetadata")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size-mb", type=float, default=300, help="granule size (default 300)")
    p.add_argument("--repeats", type=int, default=3, help="runs per case (median reported)")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--generator", choices=c.GENERATORS, default="atl03",
                   help="granule layout: the package's sample or benchmarks/_granule_alt.py")
    p.add_argument("--endpoint", choices=ENDPOINTS, default="fast",
                   help="S3 endpoint: fast, costly (per-request cost) or moto (see _endpoints)")
    p.add_argument("--kerchunk-block-mb", type=float, default=8,
                   help="block size of the second kerchunk S3 case (s3fs blockcache)")
    p.add_argument("--kerchunk-s3", choices=("both", "blocks"), default="both",
                   help="kerchunk S3 cases: its documented options and large blocks, or only "
                        "large blocks (the documented one makes a request per HDF5 read)")
    p.add_argument("--s3-repeats", type=int, default=None,
                   help="runs per S3 case (default: --repeats)")
    p.add_argument("--skip-s3", action="store_true", help="local cases only")
    p.add_argument("--only", choices=("kerchunk", "h5sidecar"), default=None,
                   help="run one indexer only (floors still run)")
    p.add_argument("--update-readme", action="store_true",
                   help="write the result tables into benchmarks/README.md")
    p.add_argument("--readme-section", default="index-results", metavar="MARKER",
                   help="the README section --update-readme replaces (default index-results)")
    p.add_argument("--from-results", type=Path, default=None, metavar="JSON",
                   help="do not run: report a saved results file (with --update-readme)")


# ---------------------------------------------------------------------------- the cases

def read_all_bytes(path: Path) -> int:
    n = 0
    with open(path, "rb", buffering=0) as f:
        while block := f.read(8 << 20):
            n += len(block)
    return n


def h5py_full_read(path: Path) -> int:
    """Decode every dataset once: the work a reader without an index would do at most."""
    n = 0

    def visit(_: str, obj: object) -> None:
        nonlocal n
        if isinstance(obj, h5py.Dataset):
            n += np.asarray(obj[()]).nbytes if obj.shape is not None else 0  # str scalars too

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return n


def kerchunk_index(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    from kerchunk.hdf import SingleHdf5ToZarr

    return SingleHdf5ToZarr(url, storage_options=storage_options).translate()


def h5sidecar_index(url: str, storage_options: dict[str, Any] | None) -> Any:
    from h5sidecar.indexer import index_granule

    return index_granule(url, storage_options=storage_options)


def count_refs(refs: dict[str, Any]) -> tuple[int, int]:
    """(arrays, chunk references) of a kerchunk v1 reference dict."""
    keys = refs.get("refs", refs)
    arrays = sum(1 for k in keys if k.endswith(".zarray"))
    chunks = sum(1 for k in keys if not k.rsplit("/", 1)[-1] in META_KEYS)
    return arrays, chunks


# ---------------------------------------------------------------------------- measuring

def run_local(name: str, fn: Callable[[], Any], repeats: int) -> tuple[c.Measurement, Any]:
    cpu: list[float] = []
    with c.local_io() as io:
        times, result = c.repeat(fn, 1, cpu)  # first run alone: its I/O is what we report
    more, result2 = c.repeat(fn, repeats - 1, cpu) if repeats > 1 else ([], result)
    m = c.Measurement(name, "local", times + more, io["requests"], io["bytes"], cpu=cpu)
    return m, result2


def run_s3(name: str, fn: Callable[[], Any], repeats: int, url: str) -> tuple[c.Measurement, Any]:
    cpu: list[float] = []
    reset_stats(url)
    times, result = c.repeat(fn, 1, cpu)
    stats = get_stats(url)
    more, result2 = c.repeat(fn, repeats - 1, cpu) if repeats > 1 else ([], result)
    m = c.Measurement(name, "s3", times + more, int(stats["requests"]),  # type: ignore[arg-type]
                      int(stats["bytes_out"]), cpu=cpu,  # type: ignore[arg-type]
                      in_a_row=int(stats["in_a_row"]))  # type: ignore[arg-type]
    return m, result2


def sidecar_sizes(kerchunk_refs: dict[str, Any] | None, ours: Any, workdir: Path
                  ) -> list[dict[str, Any]]:
    """Write each sidecar format and measure it (bytes, chunk refs, bytes per chunk)."""
    rows = []
    if kerchunk_refs is not None:
        import kerchunk.df

        _, chunks = count_refs(kerchunk_refs)
        path = workdir / "kerchunk.json"
        path.write_text(json.dumps(kerchunk_refs))
        rows.append(("kerchunk JSON", path, chunks))
        pq = workdir / "kerchunk.parq"
        kerchunk.df.refs_to_dataframe(kerchunk_refs, str(pq))
        rows.append(("kerchunk Parquet (refs_to_dataframe)", pq, chunks))
    if ours is not None:
        from h5sidecar.references import write_json, write_parquet

        path = workdir / "h5sidecar.json"
        write_json(ours, path)
        _, chunks = count_refs(json.loads(path.read_text()))
        rows.append(("h5sidecar JSON (write_json)", path, chunks))
        pq = workdir / "h5sidecar.parq"
        write_parquet(ours, pq)
        rows.append(("h5sidecar Parquet (write_parquet)", pq, chunks))
    return [{"sidecar": name, "bytes": c.dir_size(p), "chunks": n,
             "bytes_per_chunk": c.dir_size(p) / max(n, 1)} for name, p, n in rows]


def warm_up(tools: dict[str, Callable[[str, dict[str, Any] | None], Any]]) -> None:
    """Import and exercise each indexer once on a tiny granule, so no timed run pays for
    imports and first-call setup."""
    from h5sidecar.sample import write_atl03_like

    tiny = write_atl03_like(c.DATA_DIR / "warm-up.h5", photons=3000, seed=1)
    for fn in tools.values():
        fn(str(tiny), None)
    h5py_full_read(tiny)


def run(args: argparse.Namespace) -> dict[str, Any]:
    granule = c.sample_granule(args.size_mb, args.generator)
    size = granule.stat().st_size
    print(f"granule {granule.name}: {c.fmt_bytes(size)}", flush=True)
    s3_repeats = args.s3_repeats or args.repeats
    tools = {"kerchunk": kerchunk_index, "h5sidecar": h5sidecar_index}
    if args.only:
        tools = {args.only: tools[args.only]}
    measurements: list[c.Measurement] = []
    refs: dict[str, Any] = {}

    def record(m: c.Measurement) -> None:
        measurements.append(m)
        print(f"  {m.where:5s} {m.case:32s} median {m.median:8.2f} s  cpu "
              f"{statistics.median(m.cpu):6.2f} s  runs {[round(t, 2) for t in m.times]}  "
              f"requests {m.requests}  in a row {m.in_a_row}  "
              f"bytes {c.fmt_bytes(m.bytes)}", flush=True)

    warm_up(tools)
    record(run_local("read all bytes (floor)", lambda: read_all_bytes(granule), args.repeats)[0])
    record(run_local("h5py full read (floor)", lambda: h5py_full_read(granule), args.repeats)[0])
    for name, fn in tools.items():
        m, refs[name] = run_local(name, lambda fn=fn: fn(str(granule), None), args.repeats)
        record(m)
    if not args.skip_s3:
        with endpoint(args.endpoint, args.latency_ms) as ep:
            ep.publish(granule)
            url = ep.url
            opts = {"endpoint_url": url, "anon": True}
            s3url = f"s3://{c.s3_key(granule)}"
            record(run_s3("whole-object GET (floor)",
                          lambda: _get_whole(s3url, opts), s3_repeats, url)[0])
            for name, so in s3_cases(tools, opts, args.kerchunk_block_mb, args.kerchunk_s3):
                fn = tools[name.split(" ")[0]]
                m, refs[name] = run_s3(name, lambda fn=fn, so=so: fn(s3url, so), s3_repeats, url)
                record(m)
    workdir = Path(tempfile.mkdtemp(prefix="bench-index-", dir=c.DATA_DIR))
    try:
        sidecars = sidecar_sizes(refs.get("kerchunk"), refs.get("h5sidecar"), workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    arrays = {"kerchunk": count_refs(refs["kerchunk"])[0] if "kerchunk" in refs else None,
              "h5sidecar": len(refs["h5sidecar"].arrays) if "h5sidecar" in refs else None}
    return {"benchmark": "index", "env": c.environment(), "args": vars(args),
            "endpoint": Endpoint(args.endpoint, "").describe(),
            "granule": {"name": granule.name, "bytes": size, "arrays": arrays},
            "measurements": [m.to_dict() for m in measurements], "sidecars": sidecars}


def s3_cases(tools: dict[str, Any], opts: dict[str, Any], block_mb: float,
             which: str = "both") -> list[tuple[str, dict[str, Any]]]:
    """(case, storage options) of the S3 cases: h5sidecar with its own reader; kerchunk with
    its documented options (no read-ahead filling blocks: one request per HDF5 read) and with
    large s3fs blocks (fewer, bigger requests: its best case on a granule this size)."""
    cases = []
    if "kerchunk" in tools and which == "both":
        cases.append(("kerchunk", opts | {"default_fill_cache": False,
                                          "default_cache_type": "first"}))
    if "kerchunk" in tools:
        cases.append((f"kerchunk ({block_mb:g} MiB blocks)",
                      opts | {"default_cache_type": "blockcache",
                              "default_block_size": int(block_mb * 2**20)}))
    if "h5sidecar" in tools:
        cases.append(("h5sidecar", opts))
    return cases


def _get_whole(s3url: str, opts: dict[str, Any]) -> int:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
    return len(fs.cat_file(s3url))


# ---------------------------------------------------------------------------- reporting

def report(results: dict[str, Any]) -> str:
    """Markdown: the time table (with CPU, requests and requests in a row), the sidecar table
    and the ratios."""
    ms = {(m["case"], m["where"]): m for m in results["measurements"]}
    g = results["granule"]

    def cpu(m: dict[str, Any]) -> str:
        return f"{m['median_cpu_s']:.2f}" if m.get("median_cpu_s") is not None else "-"

    rows = [(m["case"], m["where"], f"{m['median_s']:.2f}", cpu(m), len(m["times"]),
             m["requests"] if m["requests"] is not None else "-",
             m["in_a_row"] if m.get("in_a_row") is not None else "-", c.fmt_bytes(m["bytes"]))
            for m in results["measurements"]]
    args = results["args"]
    out = [f"Granule: `{g['name']}` ({args.get('generator', 'atl03')}), "
           f"{c.fmt_bytes(g['bytes'])}, arrays indexed: "
           + ", ".join(f"{k} {v}" for k, v in g["arrays"].items() if v is not None)
           + f"; S3 endpoint {results.get('endpoint', 'fast (s3server.py)')}, latency "
           f"{args['latency_ms']:g} ms; "
           f"{results['env']['cpus']} CPUs, load average "
           f"{results['env']['load_avg'][0]:.1f} at the end; code "
           f"{results['env'].get('commit') or 'unknown'}; {results['env']['when']}.", "",
           c.markdown_table(["case", "where", "median s", "CPU s", "runs", "requests",
                             "in a row", "bytes moved"], rows), ""]
    out.append(c.markdown_table(
        ["sidecar", "size", "chunk refs", "bytes / chunk"],
        [(s["sidecar"], c.fmt_bytes(s["bytes"]), s["chunks"], f"{s['bytes_per_chunk']:.1f}")
         for s in results["sidecars"]]))
    ratios = []
    h = ms.get(("h5sidecar", "local"))
    floor = ms.get(("h5py full read (floor)", "local"))
    if floor and h:
        r = h["median_s"] / floor["median_s"]
        rc = (h["median_cpu_s"] / floor["median_cpu_s"]) if h.get("median_cpu_s") else None
        ratios.append(f"- local: h5sidecar index time / one full h5py read = {r:.2f} "
                      + (f"(CPU {rc:.2f}) " if rc else "")
                      + f"-> goal <= 1.0 {'met' if r <= 1.0 else 'MISSED'}")
    k = ms.get(("kerchunk", "local"))
    if k and h:
        ratios.append(f"- local: kerchunk / h5sidecar time = {k['median_s'] / h['median_s']:.2f}x")
    h = ms.get(("h5sidecar", "s3"))
    peers = [m for (case, where), m in ms.items() if where == "s3" and case.startswith("kerchunk")]
    if h and peers:
        best = min(peers, key=lambda m: m["median_s"])
        r = h["median_s"] / best["median_s"]
        ratios.append(f"- s3: h5sidecar / best kerchunk ({best['case']}) time = {r:.3f}, "
                      f"requests {h['requests']} vs {best['requests']}, in a row "
                      f"{h.get('in_a_row')} vs {best.get('in_a_row')} -> goal <= 0.2 "
                      f"{'met' if r <= 0.2 else 'MISSED'}")
    if ratios:
        out += ["", "Ratios (medians):", "", *ratios]
    return "\n".join(out)


def main(args: argparse.Namespace) -> dict[str, Any]:
    update, args.update_readme = args.update_readme, False  # our section, see --readme-section
    results = c.main_for("index", args, run, report, README)
    if update:
        c.replace_section(README, args.readme_section, report(results))
        print(f"updated {README} ({args.readme_section})")
    return results
