"""Virtual re-chunking: a Zarr view whose plain arrays have smaller chunks (the inverse of
:mod:`~h5sidecar.gateway._shard`).

A Zarr client reads whole chunks.  For an uncompressed array (no compressor, no filters: see
:func:`~h5sidecar.read.zarr._virtual_chunks.plain_array`) the gateway can present a finer chunk grid whose
chunks each lie inside one stored chunk; a virtual chunk is then served from one to
:data:`~h5sidecar.read.zarr._virtual_chunks.MAX_RUNS` byte runs of the stored chunk, laid end to end, so a
thin selection moves only the bytes near it.  Arrays that do not qualify (compressed, filtered,
structured, scalar) keep their stored chunks in this view.  Large contiguous datasets (indexed
as a few large chunks along their first dimension) are the most valuable case.

The geometry is pure and lives in :mod:`h5sidecar.read.zarr._virtual_chunks`; this module rewrites the
metadata documents and turns a virtual chunk key into a
:class:`~h5sidecar.gateway._shard.ShardLayout` (pieces laid end to end, no index), which the
gateway reads like a shard.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import ujson

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.gateway._http_rules import ResponseTooLargeError
from h5sidecar.gateway._shard import ShardLayout
from h5sidecar.read import ChunkRef, GranuleKeys, RechunkSpec, virtual_chunk_shape, virtual_runs

__all__ = ["rechunk_document", "virtual_layout"]


def _dumps(obj: object) -> bytes:
    return ujson.dumps(obj, escape_forward_slashes=False, ensure_ascii=False).encode("utf-8")


def _vchunks(keys: GranuleKeys, path: str, spec: RechunkSpec) -> tuple[int, ...] | None:
    """The virtual chunk shape of the array at ``path``, or None when it keeps its chunks."""
    arr = keys.arrays.get(path)
    if arr is None:
        return None
    v = virtual_chunk_shape(arr.meta, spec)
    return None if v == arr.meta.chunks else v


def _v2_array(doc: dict[str, Any], keys: GranuleKeys, path: str, spec: RechunkSpec) -> None:
    v = _vchunks(keys, path, spec)
    if v is not None:
        doc["chunks"] = list(v)


def _v3_node(doc: dict[str, Any], keys: GranuleKeys, path: str, spec: RechunkSpec) -> None:
    if doc.get("node_type") == "array":
        v = _vchunks(keys, path, spec)
        if v is not None:
            doc["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": list(v)}}
        return
    nested = (doc.get("consolidated_metadata") or {}).get("metadata") or {}
    prefix = f"{path}/" if path else ""
    for rel, sub in nested.items():
        _v3_node(sub, keys, prefix + rel, spec)


def rechunk_document(keys: GranuleKeys, key: str, doc: bytes, spec: RechunkSpec) -> bytes:
    """The document ``key`` of the re-chunked view, from the plain view's ``doc`` (same key
    space ``keys``, v2 or v3): every qualifying array's chunk shape replaced by its virtual one,
    in array documents and in consolidated metadata alike."""
    node, _, name = key.rpartition("/")
    parsed = ujson.loads(doc)
    if name == ".zarray":
        _v2_array(parsed, keys, node, spec)
    elif name == ".zmetadata":
        prefix = f"{node}/" if node else ""
        for mk, sub in parsed.get("metadata", {}).items():
            if mk.endswith(".zarray"):
                _v2_array(sub, keys, prefix + mk[: -len(".zarray")].rstrip("/"), spec)
    elif name == "zarr.json":
        _v3_node(parsed, keys, node, spec)
    else:
        return doc  # .zattrs, .zgroup: no chunks in them
    return _dumps(parsed)


def _index(name: str, grid: tuple[int, ...]) -> tuple[int, ...] | None:
    parts = name.split(".")
    if len(parts) != len(grid) or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    index = tuple(int(p) for p in parts)
    if any(str(i) != p or i >= g for i, p, g in zip(index, parts, grid, strict=True)):
        return None  # only canonical spellings inside the grid name a chunk
    return index


def virtual_layout(
    keys: GranuleKeys, key: str, spec: RechunkSpec, max_bytes: int
) -> tuple[bool, ShardLayout | None]:
    """Where the bytes of virtual chunk ``key`` lie (a virtual chunk is at most ``max_bytes``).

    Returns
    -------
    handled : bool
        False when ``key`` is not a chunk of a re-chunked array (serve it as the plain view
        does).
    layout : ShardLayout or None
        The runs of the stored chunk (and zero padding past its end, outside the array) laid
        end to end; None when the key is outside the virtual grid or its stored chunk is not
        stored (Zarr reads the fill value).

    Raises
    ------
    ResponseTooLargeError
        The virtual chunk is larger than ``max_bytes`` (checked before anything is built).
    InvalidReferenceError
        The stored chunk's length is not the chunk's decoded size (the sidecar does not match
        its metadata): nothing is served rather than wrong values.
    """
    path, _, name = key.rpartition("/")
    v = _vchunks(keys, path, spec)
    if v is None:
        return False, None
    arr = keys.arrays[path]
    meta = arr.meta
    grid = tuple(-(-n // c) for n, c in zip(meta.shape, v, strict=True))
    index = _index(name, grid)
    if index is None:
        return True, None
    item = np.dtype(str(meta.dtype)).itemsize
    nbytes = math.prod(v) * item
    if nbytes > max_bytes:
        raise ResponseTooLargeError(
            f"virtual chunk {key!r} is {nbytes} bytes, more than max_response_bytes={max_bytes}: "
            "use a smaller re-chunk spec"
        )
    runs = virtual_runs(meta.shape, meta.chunks, v, index, item)
    ref = arr.manifest.get(runs.source)
    if ref is None:
        return True, None
    _check_length(ref, math.prod(meta.chunks) * item, path)
    pieces: list[ChunkRef | bytes] = []
    at = 0
    for src, dst, n in zip(runs.src.tolist(), runs.dst.tolist(), runs.lengths.tolist(),
                           strict=True):  # fmt: skip
        if dst > at:
            pieces.append(bytes(dst - at))  # padding past the stored chunk (outside the array)
        pieces.append(ref[src : src + n] if isinstance(ref, bytes) else (ref[0], ref[1] + src, n))
        at = dst + n
    if runs.nbytes > at:
        pieces.append(bytes(runs.nbytes - at))
    lengths = np.array([len(p) if isinstance(p, bytes) else p[2] for p in pieces], np.int64)
    starts = np.cumsum(lengths) - lengths
    return True, ShardLayout(tuple(pieces), starts, lengths, b"")


def _check_length(ref: ChunkRef | bytes, expected: int, path: str) -> None:
    length = len(ref) if isinstance(ref, bytes) else ref[2]
    if length != expected:
        raise InvalidReferenceError(
            f"a stored chunk of {path!r} is {length} bytes, not its decoded size {expected}: the "
            "sidecar does not match the array's metadata; re-index the granule, or read the "
            "array through the plain view (/zarr3/...)"
        )
