"""A tiny, independent reference builder for tests of the persisted formats.

It makes :class:`GranuleRefs` from an h5py-written file with ``chunk_iter`` (chunked datasets
with gzip/shuffle or no filters, and contiguous ones), so the format tests do not depend on the
indexer.  ``inline_below`` inlines chunks shorter than that many bytes (read from the file).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from h5sidecar.references import (
    INLINE,
    MISSING,
    ArrayMeta,
    ArrayRefs,
    ChunkManifest,
    GranuleRefs,
    Skipped,
    SourceInfo,
)


def write_sample(path: Path) -> Path:
    """A small ATL03-like file: nested groups, gzip+shuffle chunks, missing and tiny chunks."""
    rng = np.random.default_rng(7)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "sample granule"
        h = f.create_group("gt1l/heights")
        h.attrs["description"] = "photon heights"
        n = 4_000
        ds = h.create_dataset(
            "h_ph", shape=(n,), dtype="<f4", chunks=(500,), compression="gzip", shuffle=True
        )
        ds[...] = rng.normal(100, 20, n).astype("<f4")
        ds.attrs["units"] = "meters"
        conf = h.create_dataset(
            "signal_conf_ph", shape=(n, 5), dtype="i1", chunks=(1000, 5), compression="gzip"
        )
        conf[...] = rng.integers(-2, 5, (n, 5), dtype="i1")
        # chunks 0-1 written, 2-3 never allocated: they read as the fill value
        part = h.create_dataset(
            "dist_ph",
            shape=(n,),
            dtype="<f8",
            chunks=(1000,),
            compression="gzip",
            fillvalue=-9999.0,
        )
        part[:2000] = np.linspace(0, 1, 2000)
        anc = f.create_group("ancillary_data")
        anc.create_dataset("sc_orient", data=np.int8(1))  # 0-d, contiguous
        codes = anc.create_dataset("codes", shape=(8,), dtype="u1", chunks=(4,))
        codes[...] = np.frombuffer(b"ABCDEFGH", dtype="u1")  # ASCII chunks: inlined as text
        tiny = anc.create_dataset("tiny", shape=(6,), dtype="<i2", chunks=(3,), compression="gzip")
        tiny[...] = [1, 2, 3, 4, 5, 6]
    return path


def refs_from_h5(path: Path, *, url: str | None = None, inline_below: int = 0) -> GranuleRefs:
    """Build references for every supported dataset of ``path`` (others are skipped)."""
    url = url or str(path.resolve())
    groups: dict[str, dict[str, Any]] = {}
    arrays: dict[str, ArrayRefs] = {}
    skipped: list[Skipped] = []
    raw = path.read_bytes()
    with h5py.File(path, "r") as f:
        groups[""] = _attrs(f.attrs)

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Group):
                groups[name] = _attrs(obj.attrs)
                return
            filters = _filters(obj)
            if filters is None:
                skipped.append(
                    Skipped(name, "unsupported_filter", "test helper: gzip/shuffle only")
                )
                return
            arrays[name] = _array(name, obj, filters, url, raw, inline_below)

        f.visititems(visit)
    return GranuleRefs(
        source=SourceInfo(url=url, size=path.stat().st_size, mtime=path.stat().st_mtime),
        groups=groups,
        arrays=arrays,
        skipped=tuple(skipped),
        extra={"builder": "tests"},
    )


def _filters(ds: h5py.Dataset) -> list[dict[str, Any]] | None:
    out: list[dict[str, Any]] = []
    if ds.shuffle:
        out.append({"id": "shuffle", "elementsize": ds.dtype.itemsize})
    if ds.compression == "gzip":
        out.append({"id": "zlib", "level": int(ds.compression_opts)})
    elif ds.compression is not None or ds.fletcher32 or ds.scaleoffset:
        return None
    return out


def _array(
    name: str,
    ds: h5py.Dataset,
    filters: list[dict[str, Any]],
    url: str,
    raw: bytes,
    inline_below: int,
) -> ArrayRefs:
    chunks = ds.chunks or ds.shape
    grid = tuple(math.ceil(s / c) for s, c in zip(ds.shape, chunks, strict=True))
    codes = np.full(grid, MISSING, dtype=np.int32)
    offsets = np.zeros(grid, dtype=np.uint64)
    lengths = np.zeros(grid, dtype=np.uint64)
    if ds.chunks is None:
        offset = ds.id.get_offset()
        if offset is not None:
            codes[()], offsets[()], lengths[()] = 0, offset, ds.id.get_storage_size()
    else:

        def one(info: Any) -> None:
            idx = tuple(o // c for o, c in zip(info.chunk_offset, chunks, strict=True))
            codes[idx], offsets[idx], lengths[idx] = 0, info.byte_offset, info.size

        ds.id.chunk_iter(one)
    inline = {}
    small = np.flatnonzero((codes.reshape(-1) == 0) & (lengths.reshape(-1) < inline_below))
    for flat in small.tolist():
        o, n = int(offsets.reshape(-1)[flat]), int(lengths.reshape(-1)[flat])
        inline[flat] = raw[o : o + n]
        codes.reshape(-1)[flat] = INLINE
    fill = ds.fillvalue.item() if ds.fillvalue is not None else None
    meta = ArrayMeta(
        shape=ds.shape,
        chunks=chunks,
        dtype=ds.dtype.str,
        fill_value=fill,
        filters=tuple(filters),
        dimension_names=tuple(f"{name.rpartition('/')[2]}_{i}" for i in range(ds.ndim)),
        attrs=_attrs(ds.attrs),
    )
    manifest = ChunkManifest.from_arrays(
        urls=(url,), codes=codes, offsets=offsets, lengths=lengths, inline=inline
    )
    inlined = bool(inline) and not np.any(codes >= 0)
    return ArrayRefs(
        name,
        meta,
        manifest,
        status="inlined" if inlined else "virtual",
        note="inlined: tiny" if inline else "",
    )


def _attrs(attrs: h5py.AttributeManager) -> dict[str, Any]:
    out = {}
    for k, v in attrs.items():
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, np.ndarray):
            v = v.tolist()
        elif isinstance(v, np.generic):
            v = v.item()
        out[k] = v
    return out


def edit_zarray(doc: dict[str, Any], path: str, **changes: Any) -> dict[str, Any]:
    """A copy of a JSON sidecar document with ``path/.zarray`` changed, in the document and in
    its consolidated ``.zmetadata`` copy (what planted or damaged sidecars look like)."""
    import copy
    import json

    doc = copy.deepcopy(doc)
    refs = doc["refs"]
    zarray = {**json.loads(refs[f"{path}/.zarray"]), **changes}
    refs[f"{path}/.zarray"] = json.dumps(zarray)
    zmeta = json.loads(refs[".zmetadata"])
    zmeta["metadata"][f"{path}/.zarray"] = zarray
    refs[".zmetadata"] = json.dumps(zmeta)
    return doc


def kerchunk_translate(path: Path) -> dict[str, Any]:
    """kerchunk's references of a local HDF5 file (``SingleHdf5ToZarr``, nothing inlined),
    with the garbage collector paused: kerchunk calls zarr's ``sync`` inside h5py's
    ``visititems``, holding h5py's global lock, and a collection on zarr's loop thread that
    frees an h5py object left by an earlier test then waits for that lock forever (seen: a
    300 s timeout in a parallel run)."""
    from kerchunk.hdf import SingleHdf5ToZarr

    from h5sidecar.references import gc_paused

    with gc_paused():
        return SingleHdf5ToZarr(str(path), inline_threshold=0).translate()  # type: ignore[no-any-return]
