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
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py

from benchmarks import _common as c
from benchmarks.s3server import get_stats, reset_stats, start_server

README = c.BENCH_DIR / "README.md"
META_KEYS = (".zarray", ".zattrs", ".zgroup", ".zmetadata")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size-mb", type=float, default=300, help="granule size (default 300)")
    p.add_argument("--repeats", type=int, default=3, help="runs per case (median reported)")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--s3-repeats", type=int, default=None,
                   help="runs per S3 case (default: --repeats)")
    p.add_argument("--skip-s3", action="store_true", help="local cases only")
    p.add_argument("--only", choices=("kerchunk", "h5sidecar"), default=None,
                   help="run one indexer only (floors still run)")
    p.add_argument("--update-readme", action="store_true",
                   help="write the result tables into benchmarks/README.md")
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
            n += obj[()].nbytes if obj.shape is not None else 0

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
    with c.local_io() as io:
        times, result = c.repeat(fn, 1)  # first run alone: its I/O is what we report
    more, result2 = c.repeat(fn, repeats - 1) if repeats > 1 else ([], result)
    m = c.Measurement(name, "local", times + more, io["requests"], io["bytes"])
    return m, result2


def run_s3(name: str, fn: Callable[[], Any], repeats: int, url: str) -> tuple[c.Measurement, Any]:
    reset_stats(url)
    times, result = c.repeat(fn, 1)
    stats = get_stats(url)
    more, result2 = c.repeat(fn, repeats - 1) if repeats > 1 else ([], result)
    m = c.Measurement(name, "s3", times + more, int(stats["requests"]),  # type: ignore[arg-type]
                      int(stats["bytes_out"]))  # type: ignore[arg-type]
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
    granule = c.sample_granule(args.size_mb)
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
        print(f"  {m.where:5s} {m.case:32s} median {m.median:8.2f} s  runs "
              f"{[round(t, 2) for t in m.times]}  requests {m.requests}  "
              f"bytes {c.fmt_bytes(m.bytes)}", flush=True)

    warm_up(tools)
    record(run_local("read all bytes (floor)", lambda: read_all_bytes(granule), args.repeats)[0])
    record(run_local("h5py full read (floor)", lambda: h5py_full_read(granule), args.repeats)[0])
    for name, fn in tools.items():
        m, refs[name] = run_local(name, lambda fn=fn: fn(str(granule), None), args.repeats)
        record(m)
    if not args.skip_s3:
        url, stop = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
        try:
            opts = {"endpoint_url": url, "anon": True}
            s3url = f"s3://{c.s3_key(granule)}"
            record(run_s3("whole-object GET (floor)",
                          lambda: _get_whole(s3url, opts), s3_repeats, url)[0])
            for name, fn in tools.items():
                # kerchunk's documented S3 options: no read-ahead cache filling the blocks
                so = opts | {"default_fill_cache": False, "default_cache_type": "first"} \
                    if name == "kerchunk" else opts
                m, refs[name] = run_s3(name, lambda fn=fn, so=so: fn(s3url, so), s3_repeats, url)
                record(m)
        finally:
            stop()
    workdir = Path(tempfile.mkdtemp(prefix="bench-index-", dir=c.DATA_DIR))
    try:
        sidecars = sidecar_sizes(refs.get("kerchunk"), refs.get("h5sidecar"), workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    arrays = {"kerchunk": count_refs(refs["kerchunk"])[0] if "kerchunk" in refs else None,
              "h5sidecar": len(refs["h5sidecar"].arrays) if "h5sidecar" in refs else None}
    return {"benchmark": "index", "env": c.environment(), "args": vars(args),
            "granule": {"name": granule.name, "bytes": size, "arrays": arrays},
            "measurements": [m.to_dict() for m in measurements], "sidecars": sidecars}


def _get_whole(s3url: str, opts: dict[str, Any]) -> int:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
    return len(fs.cat_file(s3url))


# ---------------------------------------------------------------------------- reporting

def report(results: dict[str, Any]) -> str:
    """Markdown: the time table, the sidecar table and the ratios."""
    ms = {(m["case"], m["where"]): m for m in results["measurements"]}
    g = results["granule"]
    rows = [(m["case"], m["where"], f"{m['median_s']:.2f}", len(m["times"]),
             m["requests"] if m["requests"] is not None else "-", c.fmt_bytes(m["bytes"]))
            for m in results["measurements"]]
    out = [f"Granule: `{g['name']}`, {c.fmt_bytes(g['bytes'])}, arrays indexed: "
           + ", ".join(f"{k} {v}" for k, v in g["arrays"].items() if v is not None)
           + f"; S3 latency {results['args']['latency_ms']:g} ms; "
           f"{results['env']['cpus']} CPUs, load average "
           f"{results['env']['load_avg'][0]:.1f} at the end; code "
           f"{results['env'].get('commit') or 'unknown'}; {results['env']['when']}.", "",
           c.markdown_table(["case", "where", "median s", "runs", "requests", "bytes moved"],
                            rows), ""]
    out.append(c.markdown_table(
        ["sidecar", "size", "chunk refs", "bytes / chunk"],
        [(s["sidecar"], c.fmt_bytes(s["bytes"]), s["chunks"], f"{s['bytes_per_chunk']:.1f}")
         for s in results["sidecars"]]))
    ratios = []
    for where in ("local", "s3"):
        k, h = ms.get(("kerchunk", where)), ms.get(("h5sidecar", where))
        if k and h:
            ratios.append(f"- {where}: kerchunk / h5sidecar time = "
                          f"{k['median_s'] / h['median_s']:.2f}x"
                          + (f", requests = {k['requests'] / max(h['requests'], 1):.2f}x"
                             if where == "s3" else ""))
    floor, h = ms.get(("h5py full read (floor)", "local")), ms.get(("h5sidecar", "local"))
    if floor and h:
        ratios.append(f"- local: h5sidecar index time / one full h5py read = "
                      f"{h['median_s'] / floor['median_s']:.2f}")
    if ratios:
        out += ["", "Ratios (medians):", "", *ratios]
    return "\n".join(out)


def main(args: argparse.Namespace) -> dict[str, Any]:
    return c.main_for("index", args, run, report, README)
