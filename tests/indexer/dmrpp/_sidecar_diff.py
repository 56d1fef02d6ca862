"""How a DMR++ sidecar's array differs from the HDF5 indexer's sidecar of the same file.

Used by the DMR++ conformance test to sort every variable into exact / metadata differs /
skipped.  Only what a reader sees counts: the storage fill value is compared only where a chunk
is missing (elsewhere nothing reads it), and a zlib level only when the DMR++ gives one (levels
do not change decoding, and older documents leave them out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from h5sidecar.references import ArrayRefs


def _filters(arr: ArrayRefs, levels: bool) -> list[dict[str, Any]]:
    out = []
    for f in arr.meta.filters:
        f = dict(f)
        if not levels and f.get("id") == "zlib":
            f.pop("level", None)
        out.append(f)
    return out


def _manifest_differs(a: ArrayRefs, b: ArrayRefs) -> bool:
    ma, mb = a.manifest, b.manifest
    if ma.grid_shape != mb.grid_shape:
        return True
    stored_a, stored_b = ma.codes >= 0, mb.codes >= 0
    if not np.array_equal(stored_a, stored_b):
        return True
    return not (
        np.array_equal(ma.offsets[stored_a], mb.offsets[stored_b])
        and np.array_equal(ma.lengths[stored_a], mb.lengths[stored_b])
    )


def metadata_differences(
    dmrpp: ArrayRefs,
    hdf5: ArrayRefs,
    types: tuple[Mapping[str, str], Mapping[str, str]] = ({}, {}),
) -> list[str]:
    """The fields of ``dmrpp`` that differ from ``hdf5`` (empty: the same sidecar entry).

    ``types``: the arrays' attribute type specs (``extra["attribute_dtypes"][path]``).
    """
    a, b = dmrpp.meta, hdf5.meta
    out = [
        name
        for name in ("dtype", "shape", "chunks", "dimension_names")
        if getattr(a, name) != getattr(b, name)
    ]
    levels = any("level" in f for f in a.filters if f.get("id") == "zlib")
    if _filters(dmrpp, levels) != _filters(hdf5, levels):
        out.append("filters")
    missing = dmrpp.manifest.n_missing or hdf5.manifest.n_missing
    if missing and dmrpp.zarray_fill_value() != hdf5.zarray_fill_value():
        out.append("fill_value")
    if dict(a.attrs) != dict(b.attrs) or dict(types[0]) != dict(types[1]):
        out.append("attributes")
    if dmrpp.status != "inlined" and hdf5.status != "inlined" and _manifest_differs(dmrpp, hdf5):
        out.append("chunks' byte ranges")
    return out
