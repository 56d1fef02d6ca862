"""A granule whose variables each have one never-written chunk, and edits of its references.

One variable per (dtype, 1-D or 2-D, first / middle / last chunk never written): the chunk
HDF5 never allocated reads as the storage fill value, and the sidecar keeps it missing
(``MISSING``) wherever a Zarr reader reads a missing chunk as that value: integers and
fixed-size strings with the default fill, floats with a CF ``_FillValue`` equal to the storage
fill.  (Floats with the default fill and variable-length strings are stored in the sidecar
instead; see ``h5sidecar.indexer.layout._fillchunks`` and the string materialisation.)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import h5py
import numpy as np

from h5sidecar.references import MISSING, ChunkManifest, GranuleRefs

#: dtype name -> (dtype, storage fill = CF _FillValue, or None for HDF5's default fill)
DTYPES: dict[str, tuple[np.dtype, float | None]] = {
    "i4": (np.dtype("i4"), None),
    "f8": (np.dtype("f8"), -9999.0),
    "S6": (np.dtype("S6"), None),
    "str": (h5py.string_dtype(), None),
}
#: geometry name -> (shape, chunks)
GEOMETRIES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "1d": ((40,), (10,)),
    "2d": ((30, 40), (10, 20)),
}
WHERE = ("first", "middle", "last")
#: variables whose never-written chunk the sidecar keeps missing
KEPT_MISSING = tuple(
    f"{d}_{g}_{w}" for d, g, w in itertools.product(("i4", "f8", "S6"), GEOMETRIES, WHERE)
)


def grid_of(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[int, ...]:
    """Chunks per dimension."""
    return tuple(-(-s // c) for s, c in zip(shape, chunks, strict=True))


def unwritten_index(name: str) -> tuple[int, ...]:
    """The never-written chunk of variable ``name`` (``"i4_2d_middle"``)."""
    _, geometry, where = name.split("_")
    grid = grid_of(*GEOMETRIES[geometry])
    flat = {"first": 0, "middle": math.prod(grid) // 2, "last": math.prod(grid) - 1}[where]
    return tuple(int(i) for i in np.unravel_index(flat, grid))


def _values(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    n = np.arange(1, math.prod(shape) + 1).reshape(shape)  # no value equals a fill value
    if dtype.kind in "iuf":
        return n.astype(dtype)
    return np.char.mod("v%d", n).astype(object if dtype.kind == "O" else dtype)


def write_unwritten_granule(path: Path) -> Path:
    """Write the granule (gzip chunks, except variable-length strings); return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for (dname, (dtype, fill)), (gname, (shape, chunks)), where in itertools.product(
            DTYPES.items(), GEOMETRIES.items(), WHERE
        ):
            name = f"{dname}_{gname}_{where}"
            extra = {} if dtype.kind == "O" else {"compression": "gzip"}
            if fill is not None:
                extra["fillvalue"] = fill
            dset = f.create_dataset(name, shape, dtype=dtype, chunks=chunks, **extra)
            if fill is not None:
                dset.attrs["_FillValue"] = np.array(fill, dtype)
            values = _values(dtype, shape)
            skip = unwritten_index(name)
            for index in np.ndindex(grid_of(shape, chunks)):
                if index != skip:
                    region = tuple(
                        slice(i * c, min((i + 1) * c, s))
                        for i, c, s in zip(index, chunks, shape, strict=True)
                    )
                    dset[region] = values[region]
    return path


def with_chunk(
    refs: GranuleRefs, path: str, index: tuple[int, ...], like: tuple[int, ...] | None
) -> GranuleRefs:
    """``refs`` with chunk ``index`` of ``path`` pointing where chunk ``like`` points, or
    missing when ``like`` is None (a tampered sidecar: the bytes stay those of the source)."""
    arr = refs.arrays[path]
    m = arr.manifest
    codes, offsets, lengths = m.codes.copy(), m.offsets.copy(), m.lengths.copy()
    if like is None:
        codes[index], offsets[index], lengths[index] = MISSING, 0, 0
    else:
        codes[index], offsets[index], lengths[index] = codes[like], offsets[like], lengths[like]
    manifest = ChunkManifest.from_arrays(
        urls=m.urls, codes=codes, offsets=offsets, lengths=lengths, inline=m.inline
    )
    arrays = dict(refs.arrays)
    arrays[path] = dataclasses.replace(arr, manifest=manifest)
    return dataclasses.replace(refs, arrays=arrays)
