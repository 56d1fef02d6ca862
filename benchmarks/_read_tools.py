"""The readers compared by ``bench_read.py``: one function per tool, each taking the prepared
:class:`Env` and a list of ``(array path, photon slice or None)`` and returning the arrays read,
keyed by path (checked against h5py by the benchmark)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py

from benchmarks import _common as c

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


def prepare(granule: Path, url: str, need_kerchunk: bool,
            publish: Callable[[Path], None] | None = None, refs_tag: str = "") -> Env:
    """Index the granule once (h5sidecar from the endpoint, kerchunk from the local file with
    its URLs pointed at the endpoint) and put both sidecars next to it on the endpoint
    (``publish`` uploads them to an endpoint that does not serve the folder).  ``refs_tag``
    keeps the sidecars of an endpoint whose ETags differ (moto's are content hashes) apart:
    a sidecar records the identity of the object it was indexed from."""
    from h5sidecar.read import load_refs

    opts = {"endpoint_url": url, "anon": True}
    s3url = f"s3://{c.s3_key(granule)}"
    folder = granule.parent.with_name(granule.parent.name + "-refs" + refs_tag)
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
    if publish is not None:
        publish(folder)
    sidecar = f"s3://{c.s3_key(parq)}"
    return Env(granule, url, opts, s3url, sidecar,
               f"s3://{c.s3_key(kjson)}" if need_kerchunk else None,
               load_refs(sidecar, opts, cache=None))


def clear_caches() -> None:
    """Every run starts cold: no parsed sidecar, no cached chunk."""
    from h5sidecar.read import clear_caches as clear

    clear()


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
    from h5sidecar.read import SidecarStore
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


def h5sidecar_xarray_async(env: Env, items: Items) -> dict[str, Any]:
    """The xarray engine without Dask: lazy variables loaded together with ``load_async``
    (one batch: coalesced fetches, chunks decoded in parallel threads)."""
    import xarray as xr

    store = _sidecar_store(env)
    groups = {p.rpartition("/")[0] for p, _ in items}
    datasets = {g: xr.open_dataset(store, engine="h5sidecar", group=g or None, chunks=None,
                                   decode_cf=False, create_default_indexes=False)
                for g in groups}
    lazy = {}
    for p, sel in items:
        g, _, name = p.rpartition("/")
        var = datasets[g][name].variable  # the variable alone, as h5py reads it
        lazy[p] = var if sel is None else var[sel]

    async def load() -> list[Any]:
        return await asyncio.gather(*(v.load_async() for v in lazy.values()))

    return {p: v.values for p, v in zip(lazy, asyncio.run(load()), strict=True)}


def h5sidecar_read_arrays(env: Env, items: Items) -> dict[str, Any]:
    """``h5sidecar.read_arrays``: the batch reader alone (no xarray, no zarr), one call."""
    from h5sidecar.read import read_arrays

    return read_arrays(env.sidecar, {p: sel for p, sel in items}, storage_options=env.opts)


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
    ("h5sidecar: xarray engine (Dask)", "h5sidecar", h5sidecar_xarray),
    ("h5sidecar: xarray engine, load_async", "h5sidecar", h5sidecar_xarray_async),
    ("h5sidecar: read_arrays (batch reader)", "h5sidecar", h5sidecar_read_arrays),
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
