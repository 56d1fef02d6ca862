"""Zarr v2 metadata documents -> model records (groups, :class:`ArrayMeta`), validating.

Both sidecar readers hand the consolidated metadata (``key -> document``) to
:func:`split_metadata`, then build each array's :class:`ArrayMeta` with :func:`array_meta`.
Anything a plain Zarr reader would choke on is rejected here with an
:class:`~h5sidecar.errors.InvalidReferenceError` naming the key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references._array_meta import ArrayMeta
from h5sidecar.references._cf import decode_fill_attr
from h5sidecar.references._names import check_node_path

__all__ = [
    "MAX_CHUNK_BYTES",
    "MAX_GRID_POSITIONS",
    "MAX_NDIM",
    "ZarrNodes",
    "array_meta",
    "select_nodes",
    "split_metadata",
]

#: Chunk-grid positions of one array a reader accepts: the limit the indexer applies
#: (``indexer._layout.MAX_GRID_CHUNKS``).  A manifest is dense over its grid (offsets, lengths
#: and codes: 17 bytes a position), so this bounds one array's manifest at ~570 MB; a planted
#: sidecar claiming more is refused before anything is allocated.
MAX_GRID_POSITIONS = 2**25
#: Decoded bytes of one chunk: HDF5 itself caps a chunk at 4 GiB.
MAX_CHUNK_BYTES = 2**32
#: Dimensions of one array (numpy's own limit is 64).
MAX_NDIM = 32
#: Largest extent of one dimension (an int64 index must hold it).
_MAX_EXTENT = 2**63 - 1

_META_NAMES = (".zgroup", ".zattrs", ".zarray")

#: Sentinel: "use the fill value of .zarray" (``None`` is a legitimate fill value).
KEEP = object()


class ZarrNodes:
    """Groups and arrays found in a set of Zarr v2 metadata documents (insertion ordered)."""

    __slots__ = ("arrays", "groups")

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}
        self.arrays: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}


def split_metadata(meta: Mapping[str, Any]) -> ZarrNodes:
    """Sort ``{key: document}`` into groups (with attrs) and arrays (``.zarray``, ``.zattrs``).

    Raises
    ------
    InvalidReferenceError
        On Zarr v3 keys, documents that are not JSON objects, attributes without a node, or a
        node name a Zarr key space cannot hold (``..``, ``.zarray``, ...; checked before any
        record file is fetched).
    """
    nodes = ZarrNodes()
    attrs: dict[str, dict[str, Any]] = {}
    for key, doc in meta.items():
        parent, _, name = key.rpartition("/")
        if name == "zarr.json":
            raise InvalidReferenceError(
                f"{key!r} is Zarr v3 metadata; only Zarr v2 (kerchunk v1) references are "
                "supported: write the references with zarr_format 2"
            )
        if name == ".zmetadata":
            continue  # a nested consolidated copy: derived data, the documents are what count
        if name not in _META_NAMES:
            raise InvalidReferenceError(f"unexpected metadata key {key!r} in the sidecar")
        if parent:
            check_node_path(parent, "the node")
        if not isinstance(doc, dict):
            raise InvalidReferenceError(
                f"{key!r} must hold a JSON object, got {type(doc).__name__}; re-create the sidecar"
            )
        if name == ".zgroup":
            nodes.groups.setdefault(parent, {})
        elif name == ".zarray":
            nodes.arrays[parent] = (doc, {})
        else:
            attrs[parent] = doc
    for path, doc in attrs.items():
        if path in nodes.arrays:
            nodes.arrays[path] = (nodes.arrays[path][0], doc)
        elif path in nodes.groups or path == "":
            nodes.groups[path] = dict(doc)
        else:
            raise InvalidReferenceError(
                f"{path}/.zattrs has no .zgroup or .zarray beside it; re-create the sidecar"
            )
    clash = set(nodes.groups) & set(nodes.arrays)
    if clash:
        raise InvalidReferenceError(f"{min(clash)!r} is both a group and an array")
    return nodes


def select_nodes(nodes: ZarrNodes, chosen: set[str]) -> ZarrNodes:
    """``nodes`` with the arrays not in ``chosen`` left out (groups kept)."""
    out = ZarrNodes()
    out.groups = nodes.groups
    out.arrays = {p: v for p, v in nodes.arrays.items() if p in chosen}
    return out


def array_meta(
    path: str, zarray: Mapping[str, Any], zattrs: Mapping[str, Any], fill_value: Any = KEEP
) -> ArrayMeta:
    """Build :class:`ArrayMeta` from a ``.zarray`` and ``.zattrs`` document.

    ``_ARRAY_DIMENSIONS`` moves from the attributes to ``dimension_names``; ``fill_value``
    overrides the ``.zarray`` one when given (the HDF5 storage fill value kept in our extras).
    """
    where = f"{path}/.zarray"
    if zarray.get("zarr_format", 2) != 2:
        raise InvalidReferenceError(f"{where}: zarr_format must be 2")
    if zarray.get("dimension_separator", ".") not in (".", None):
        raise InvalidReferenceError(
            f"{where}: dimension_separator {zarray['dimension_separator']!r} is not supported; "
            "chunk keys must use '.'"
        )
    missing = [k for k in ("shape", "chunks", "dtype") if k not in zarray]
    if missing:
        raise InvalidReferenceError(f"{where} lacks {', '.join(missing)}; re-create the sidecar")
    shape, chunks = zarray["shape"], zarray["chunks"]
    if not _int_list(shape) or not _int_list(chunks) or any(s < 0 for s in shape):
        raise InvalidReferenceError(
            f"{where}: shape {shape!r} and chunks {chunks!r} must be lists of non-negative ints"
        )
    if not isinstance(zarray["dtype"], (str, list)):
        raise InvalidReferenceError(f"{where}: dtype must be a string or a list of fields")
    _check_bounds(where, shape, chunks)
    filters = zarray.get("filters") or []
    compressor = zarray.get("compressor")
    if not isinstance(filters, list) or not all(_codec(f) for f in filters):
        raise InvalidReferenceError(f"{where}: filters must be a list of codec configs with 'id'")
    if compressor is not None and not _codec(compressor):
        raise InvalidReferenceError(f"{where}: compressor must be a codec config with 'id'")
    order = zarray.get("order", "C")
    if order not in ("C", "F"):
        raise InvalidReferenceError(f"{where}: order must be 'C' or 'F', got {order!r}")
    attrs = dict(zattrs)
    dims = attrs.pop("_ARRAY_DIMENSIONS", [])
    if not isinstance(dims, list) or not all(isinstance(d, str) for d in dims):
        raise InvalidReferenceError(f"{path}/.zattrs: _ARRAY_DIMENSIONS must be a list of names")
    if "_FillValue" in attrs and isinstance(zarray["dtype"], str):
        attrs["_FillValue"] = decode_fill_attr(attrs["_FillValue"], _np_dtype(zarray["dtype"]))
    meta = ArrayMeta(
        shape=tuple(shape),
        chunks=tuple(chunks),
        dtype=zarray["dtype"],
        fill_value=zarray.get("fill_value") if fill_value is KEEP else fill_value,
        filters=tuple(filters),
        compressor=compressor,
        dimension_names=tuple(dims),
        attrs=attrs,
        order=order,
    )
    _check_dtype(where, meta)
    if fill_value is not KEEP:  # the .zarray's own, which zarr parses
        _check_fill(where, meta.numpy_dtype, zarray.get("fill_value"))
    return meta


def _check_bounds(where: str, shape: list[int], chunks: list[int]) -> None:
    """Refuse, before anything is allocated, grids and chunks no HDF5 granule can have."""
    if len(shape) != len(chunks):
        raise InvalidReferenceError(f"{where}: shape {shape} and chunks {chunks} differ in rank")
    if len(shape) > MAX_NDIM:
        raise InvalidReferenceError(f"{where}: {len(shape)} dimensions, more than {MAX_NDIM}")
    if any(c <= 0 or c > _MAX_EXTENT for c in chunks) or any(s > _MAX_EXTENT for s in shape):
        raise InvalidReferenceError(
            f"{where}: chunks {chunks} must be positive and shape {shape} below 2**63"
        )
    positions = math.prod(-(-s // c) for s, c in zip(shape, chunks, strict=True))
    if positions > MAX_GRID_POSITIONS:
        raise InvalidReferenceError(
            f"{where}: shape {shape} in chunks {chunks} is a grid of {positions} chunks, more "
            f"than the {MAX_GRID_POSITIONS} a sidecar may hold; the sidecar is corrupt or was "
            "not written by an indexer: re-index the granule"
        )


def _check_dtype(where: str, meta: ArrayMeta) -> None:
    try:
        dtype = meta.numpy_dtype
    except (TypeError, ValueError, OverflowError, KeyError, IndexError) as exc:
        raise InvalidReferenceError(
            f"{where}: dtype {meta.dtype!r} is not a numpy type ({exc}); re-create the sidecar"
        ) from exc
    if dtype.hasobject and dtype != np.dtype(object):
        raise InvalidReferenceError(
            f"{where}: dtype {meta.dtype!r} mixes Python objects into a structure; re-create "
            "the sidecar"
        )
    _check_fill(where, dtype, meta.fill_value)
    nbytes = math.prod(meta.chunks) * max(dtype.itemsize, 1)
    if nbytes > MAX_CHUNK_BYTES:
        raise InvalidReferenceError(
            f"{where}: one chunk of {list(meta.chunks)} x {dtype} is {nbytes} bytes decoded, "
            f"more than {MAX_CHUNK_BYTES} (HDF5's limit); the sidecar is corrupt: re-index"
        )


_FLOAT_WORDS = ("NaN", "Infinity", "-Infinity")


def _check_fill(where: str, dtype: np.dtype, fv: Any) -> None:
    """Refuse a ``fill_value`` that is not the Zarr v2 JSON of a ``dtype`` value.

    zarr parses it when an array opens and raises ``TypeError`` or ``OverflowError`` (int32
    ``2147483648``); checked here, every reader refuses the sidecar the same way.  Strings
    and raw bytes (base64 text) and Python objects are left to the readers' decoding.
    """
    if fv is None or dtype.kind in "OSUV" or dtype.fields is not None:
        return
    if dtype.kind == "b":
        ok = isinstance(fv, bool) or (type(fv) is int and fv in (0, 1))
    elif dtype.kind in "iumM":
        info = np.iinfo(dtype if dtype.kind in "iu" else np.int64)
        value = _intish(fv)
        ok = (value is not None and info.min <= value <= info.max) or (
            dtype.kind in "mM" and fv == "NaT"
        )
    elif dtype.kind == "f":
        ok = _floatish(fv)
    else:  # complex: [real, imaginary], or a real number
        ok = _floatish(fv) or (
            isinstance(fv, list) and len(fv) == 2 and all(_floatish(x) for x in fv)
        )
    if not ok:
        raise InvalidReferenceError(
            f"{where}: fill_value {fv!r} is not a value of {dtype} in Zarr v2 JSON; the sidecar "
            "is corrupt: re-create it"
        )


def _intish(fv: Any) -> int | None:
    """The integer a JSON fill value stands for (zarr takes ``3``, ``3.0`` and ``"3"``)."""
    if isinstance(fv, bool):
        return int(fv)
    if isinstance(fv, int):
        return fv
    if isinstance(fv, float) and math.isfinite(fv) and fv.is_integer():
        return int(fv)
    if isinstance(fv, str) and len(fv) < 40 and re.fullmatch(r"[+-]?[0-9]+", fv):
        return int(fv)
    return None


def _floatish(fv: Any) -> bool:
    if isinstance(fv, (int, float)):
        return True
    return isinstance(fv, str) and (fv in _FLOAT_WORDS or fv.startswith("0x"))


def _np_dtype(dtype: str) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError as exc:
        raise InvalidReferenceError(f"dtype {dtype!r} is not a numpy type string") from exc


def _int_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def _codec(c: Any) -> bool:
    return isinstance(c, dict) and isinstance(c.get("id"), str)
