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

Workloads: **all** (every variable of the granule, whole) and **science** (``h_ph``,
``lat_ph``, ``lon_ph``, ``delta_time`` of one beam, plus the middle 10% of the photons of every
photon-rate variable of every beam).  Each case runs ``--repeats`` times with caches cleared
(median reported) and every value is checked against h5py's.  Also: opening the whole
hierarchy's metadata from the sidecar (GETs, seconds).

Run with ``python benchmarks/run.py read [--size-mb 300] [--repeats 3] [--only h5sidecar]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from benchmarks import _common as c
from benchmarks.s3server import get_stats, reset_stats, start_server

README = c.BENCH_DIR / "README.md"
FLOOR = "h5py local (floor)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size-mb", type=float, default=300, help="granule size (default 300)")
    p.add_argument("--repeats", type=int, default=3, help="runs per case (median reported)")
    p.add_argument("--budget-s", type=float, default=60,
                   help="no further runs of a case once its runs took this long (default 60)")
    p.add_argument("--kerchunk-xarray-all", action="store_true",
                   help="also read every variable with kerchunk + xarray (slow: ~20x the bytes)")
    p.add_argument("--latency-ms", type=float, default=20, help="S3 first-byte latency")
    p.add_argument("--only", choices=FAMILIES, action="append", default=None,
                   help="run these tool families only (repeatable; the floor always runs)")
    p.add_argument("--workload", choices=("all", "science"), action="append", default=None,
                   help="run these workloads only (repeatable; default both)")
    p.add_argument("--update-readme", action="store_true",
                   help="write the result tables into benchmarks/README.md")
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
    for key, ref in want.items():
        if key not in got:
            continue
        val = np.asarray(got[key])
        assert val.shape == ref.shape, f"{case}: {key} shape {val.shape} != h5py {ref.shape}"
        nan = ref.dtype.kind in "fc"
        assert np.array_equal(val, ref, equal_nan=nan), f"{case}: {key} differs from h5py"


# ---------------------------------------------------------------------------- the tools

BEAMS = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")
SCIENCE_BEAM = "gt1l"
SCIENCE_VARS = ("h_ph", "lat_ph", "lon_ph", "delta_time")
FAMILIES = ("h5py+s3fs", "kerchunk", "h5sidecar", "download")
PART = 8 << 20  # s3fs block cache block and parallel download part
Items = list[tuple[str, "slice | None"]]


@dataclass
class Env:
    """Where everything is: the local granule, the endpoint, the sidecars on it."""

    granule: Path
    url: str  # endpoint
    opts: dict[str, Any]
    s3url: str  # the granule on the endpoint
    sidecar: str  # h5sidecar Parquet sidecar on the endpoint
    kerchunk: str | None  # kerchunk JSON on the endpoint
    refs: Any  # the parsed h5sidecar sidecar (for the bytes each selection needs)
    failed: dict[str, str] = field(default_factory=dict)  # kerchunk arrays zarr cannot decode


def prepare(granule: Path, url: str, need_kerchunk: bool) -> Env:
    """Index the granule once (h5sidecar from the endpoint, kerchunk from the local file with
    its URLs pointed at the endpoint) and put both sidecars next to it on the endpoint."""
    from h5sidecar.gateway import load_refs

    opts = {"endpoint_url": url, "anon": True}
    s3url = f"s3://{c.s3_key(granule)}"
    folder = granule.parent.with_name(granule.parent.name + "-refs")
    folder.mkdir(exist_ok=True)
    parq = folder / f"{granule.name}.parq"
    if not parq.exists() or parq.stat().st_mtime < granule.stat().st_mtime:
        from h5sidecar.indexer import index_granule
        from h5sidecar.references import write_parquet

        print("indexing with h5sidecar ...", flush=True)
        shutil.rmtree(parq, ignore_errors=True)
        write_parquet(index_granule(s3url, storage_options=opts), parq)
    kjson = folder / f"{granule.name}.kerchunk.json"
    kjson = kjson.with_suffix(".consolidated.json")
    if need_kerchunk and (not kjson.exists() or kjson.stat().st_mtime < granule.stat().st_mtime):
        from kerchunk.hdf import SingleHdf5ToZarr

        print("indexing with kerchunk (local file) ...", flush=True)
        refs = SingleHdf5ToZarr(str(granule)).translate()
        for value in refs["refs"].values():
            if isinstance(value, list) and value and value[0] == str(granule):
                value[0] = s3url  # same bytes, read from the endpoint
        # zarr 3.1's FsspecStore over reference:// lists no members in subgroups, so give
        # the references consolidated metadata (as kerchunk.df's Parquet has)
        refs["refs"][".zmetadata"] = json.dumps({"zarr_consolidated_format": 1, "metadata": {
            k: json.loads(v) for k, v in refs["refs"].items()
            if k.rsplit("/", 1)[-1] in (".zgroup", ".zarray", ".zattrs")}})
        kjson.write_text(json.dumps(refs))
    sidecar = f"s3://{c.s3_key(parq)}"
    return Env(granule, url, opts, s3url, sidecar,
               f"s3://{c.s3_key(kjson)}" if need_kerchunk else None,
               load_refs(sidecar, opts, cache=None))


def clear_caches() -> None:
    """Every run starts cold: no parsed sidecar, no cached chunk."""
    from h5sidecar.gateway._cache import CHUNKS, SIDECARS

    SIDECARS.clear()
    CHUNKS.clear()


def _h5_read(f: h5py.File, items: Items) -> dict[str, Any]:
    return {p: f[p][()] if sel is None else f[p][sel] for p, sel in items}


def h5py_local(env: Env, items: Items) -> dict[str, Any]:
    with h5py.File(env.granule, "r") as f:
        return _h5_read(f, items)


def _s3fs_h5py(env: Env, items: Items, **open_kw: Any) -> dict[str, Any]:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **env.opts)
    with fs.open(env.s3url, "rb", **open_kw) as fobj, h5py.File(fobj, "r") as f:
        return _h5_read(f, items)


def download_h5py(env: Env, items: Items) -> dict[str, Any]:
    """The whole object in parallel ranged GETs, then h5py on the in-memory image."""
    import obstore
    from obstore.store import S3Store

    bucket, key = c.s3_key(env.granule).split("/", 1)
    size = env.granule.stat().st_size

    async def fetch() -> bytes:
        store = S3Store(bucket, endpoint=env.url, skip_signature=True, region="us-east-1",
                        client_options={"allow_http": True})
        parts = await asyncio.gather(*(
            obstore.get_range_async(store, key, start=s, end=min(s + PART, size))
            for s in range(0, size, PART)))
        return b"".join(parts)

    with h5py.File.in_memory(asyncio.run(fetch())) as f:
        return _h5_read(f, items)


def _zarr_read(store: Any, items: Items, consolidated: bool,
               failed: dict[str, str] | None = None) -> dict[str, Any]:
    """Read every item concurrently through zarr's async API (what a zarr user who wants
    speed does; the same for every store).  With ``failed``, arrays zarr cannot decode are
    recorded there (path -> error) instead of failing the run."""
    import zarr.api.asynchronous as za
    from zarr.core.sync import sync

    async def go() -> dict[str, Any]:
        g = await za.open_group(store=store, mode="r", zarr_format=2,
                                use_consolidated=consolidated)

        async def one(path: str, sel: slice | None) -> tuple[str, Any]:
            arr = await g.getitem(path)
            try:
                return path, await arr.getitem(... if sel is None else sel)
            except ValueError as exc:  # zarr refuses the references' metadata for this array
                if failed is None:
                    raise
                failed[path] = f"{type(exc).__name__}: {exc}"
                return path, None

        out = dict(await asyncio.gather(*(one(p, s) for p, s in items)))
        return {k: v for k, v in out.items() if v is not None or k not in (failed or {})}

    return sync(go())


def _reference_store(env: Env) -> Any:
    import fsspec
    from zarr.storage import FsspecStore

    fs = fsspec.filesystem("reference", fo=env.kerchunk, target_options=env.opts,
                           remote_protocol="s3", asynchronous=True,
                           remote_options=env.opts | {"asynchronous": True,
                                                      "skip_instance_cache": True},
                           skip_instance_cache=True)
    return FsspecStore(fs, read_only=True, path="")


def _h5sidecar_fs_store(env: Env) -> Any:
    import fsspec
    from zarr.storage import FsspecStore

    fs = fsspec.filesystem("h5sidecar", fo=env.sidecar, target_options=env.opts,
                           asynchronous=True, skip_instance_cache=True)
    return FsspecStore(fs, read_only=True, path="")


def _sidecar_store(env: Env, **settings: Any) -> Any:
    from h5sidecar.gateway import SidecarStore
    from h5sidecar.settings import ReadSettings

    return SidecarStore(env.sidecar, storage_options=env.opts,
                        settings=ReadSettings(**settings) if settings else None)


def _xarray_read(open_group: Callable[[str | None], Any], items: Items) -> dict[str, Any]:
    """Open each group lazily (Dask chunks as the engine recommends, ``chunks={}``), then
    compute every selection in one ``dask.compute`` with 32 threads (I/O-bound tasks)."""
    import dask

    groups = {p.rpartition("/")[0] for p, _ in items}
    datasets = {g: open_group(g or None) for g in groups}
    lazy = {}
    for p, sel in items:
        g, _, name = p.rpartition("/")
        da = datasets[g][name]
        lazy[p] = da if sel is None else da[sel]
    with dask.config.set(scheduler="threads", num_workers=32):
        (done,) = dask.compute(lazy)
    return {p: v.values for p, v in done.items()}


def kerchunk_xarray(env: Env, items: Items) -> dict[str, Any]:
    import xarray as xr

    store = _reference_store(env)
    items = [(p, sel) for p, sel in items if p not in env.failed]  # as for reference:// + zarr

    def open_group(g: str | None) -> Any:
        try:
            return xr.open_dataset(store, engine="zarr", group=g, consolidated=True,
                                   zarr_format=2, chunks={}, decode_cf=False)
        except ValueError as exc:  # kerchunk's phony dimensions can clash within a group
            return exc

    groups = {p.rpartition("/")[0] for p, _ in items}
    broken = {g for g in groups if isinstance(open_group(g or None), ValueError)}
    for p, _ in items:
        if p.rpartition("/")[0] in broken:
            env.failed.setdefault(p, "xarray cannot open its group (dimension clash)")
    items = [(p, sel) for p, sel in items if p.rpartition("/")[0] not in broken]
    return _xarray_read(open_group, items)


def h5sidecar_xarray(env: Env, items: Items) -> dict[str, Any]:
    import xarray as xr

    store = _sidecar_store(env)
    return _xarray_read(lambda g: xr.open_dataset(
        store, engine="h5sidecar", group=g, chunks={}, decode_cf=False), items)


CASES: list[tuple[str, str, Callable[[Env, Items], dict[str, Any]]]] = [
    ("h5py + s3fs (default cache)", "h5py+s3fs", lambda e, i: _s3fs_h5py(e, i)),
    ("h5py + s3fs (8 MiB block cache)", "h5py+s3fs",
     lambda e, i: _s3fs_h5py(e, i, block_size=PART, cache_type="blockcache")),
    ("download (obstore, 8 MiB parts) + h5py", "download", download_h5py),
    ("kerchunk: reference:// + zarr", "kerchunk",
     lambda e, i: _zarr_read(_reference_store(e), i, consolidated=True, failed=e.failed)),
    ("kerchunk: reference:// + xarray", "kerchunk", kerchunk_xarray),
    ("h5sidecar: fsspec + zarr", "h5sidecar",
     lambda e, i: _zarr_read(_h5sidecar_fs_store(e), i, consolidated=True)),
    ("h5sidecar: SidecarStore + zarr", "h5sidecar",
     lambda e, i: _zarr_read(_sidecar_store(e), i, consolidated=True)),
    ("h5sidecar: SidecarStore + zarr, max_gap=0", "h5sidecar",
     lambda e, i: _zarr_read(_sidecar_store(e, max_gap=0), i, consolidated=True)),
    ("h5sidecar: xarray engine", "h5sidecar", h5sidecar_xarray),
]


def _open_hierarchy(store: Any, consolidated: bool) -> int:
    import zarr

    root = zarr.open_group(store, mode="r", zarr_format=2, use_consolidated=consolidated)
    return len(list(root.members(max_depth=None)))


OPEN_CASES: list[tuple[str, str, Callable[[Env], Any]]] = [
    ("h5sidecar Parquet sidecar (SidecarStore)", "h5sidecar",
     lambda e: _open_hierarchy(_sidecar_store(e), True)),
    ("kerchunk JSON (reference://)", "kerchunk",
     lambda e: _open_hierarchy(_reference_store(e), True)),
]


def warm_up(env: Env, items: Items, families: list[str]) -> None:
    """Run every tool once on two arrays, so no timed run pays for imports and first calls."""
    h5py_local(env, items)
    for _, family, fn in CASES:
        if family in families:
            fn(env, items)
    for _, family, fn2 in OPEN_CASES:
        if family in families:
            fn2(env)


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
            else:
                m.requests, m.bytes = io["requests"], io["bytes"]
        if want is not None:
            check(case, out, want, unreadable or {})
            m.unreadable = len(set(want) - set(out))
    print(f"  {workload:8s} {case:34s} median {statistics.median(m.times):7.2f} s  cpu "
          f"{statistics.median(m.cpu):6.2f} s  runs {[round(t, 2) for t in m.times]}  "
          f"requests {m.requests}  bytes {c.fmt_bytes(m.bytes)}", flush=True)
    return m, out


def run(args: argparse.Namespace) -> dict[str, Any]:
    granule = c.sample_granule(args.size_mb)
    size = granule.stat().st_size
    print(f"granule {granule.name}: {c.fmt_bytes(size)}", flush=True)
    families = args.only or list(FAMILIES)
    chosen = args.workload or ["all", "science"]
    loads = {k: v for k, v in workloads(granule).items() if k in chosen}
    url, stop = start_server(c.S3_ROOT, latency_ms=args.latency_ms)
    try:
        env = prepare(granule, url, need_kerchunk="kerchunk" in families)
        warm_up(env, loads[chosen[0]][:2], families)
        results: list[ReadMeasurement] = []
        needed = {}
        for workload, items in loads.items():
            needed[workload] = needed_bytes(env.refs, items)
            m, want = measure(FLOOR, workload, lambda items=items: h5py_local(env, items),
                              args.repeats, args.budget_s, None, None)
            results.append(m)
            for case, family, fn in CASES:
                if family not in families or (fn is kerchunk_xarray and workload == "all"
                                               and not args.kerchunk_xarray_all):
                    continue
                m, _ = measure(case, workload, lambda fn=fn, items=items: fn(env, items),
                               args.repeats, args.budget_s, url, want, env.failed)
                results.append(m)
            del want
        opens = [measure(name, "open metadata", lambda fn=fn: fn(env), args.repeats,
                         args.budget_s, url, None)[0]
                 for name, family, fn in OPEN_CASES if family in families]
    finally:
        stop()
    return {"benchmark": "read", "env": c.environment(), "args": vars(args),
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
           + f"; S3 latency {results['args']['latency_ms']:g} ms; {env['cpus']} CPUs, load "
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
                         m["requests"], c.fmt_bytes(m["bytes"]),
                         f"{m['bytes'] / floor['bytes']:.2f}" if case != FLOOR else "1.00",
                         f"{m['median_cpu_s']:.2f}",
                         f"{m['median_cpu_s'] / floor['median_cpu_s']:.2f}"))
        out += [(f"**Workload {workload}** (median of {len(floor['times'])} runs; the floor's "
                 "requests and bytes are read syscalls and bytes read, page cache included)"), "",
                c.markdown_table(["tool", "s", "x floor", "requests", "bytes moved",
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
    if args.from_results:
        path = args.from_results
        results = json.loads(path.read_text())
    else:
        results = run(args)
        path = c.save_results("read", results)
    text = report(results)
    print("\n" + text + f"\n\nresults: {path}")
    if args.update_readme:
        c.replace_section(README, "read-results", text)
        print(f"updated {README}")
    return results

