"""``H5Pset_external`` storage: a contiguous dataset whose bytes live in raw files beside it.

The dataset's bytes are the concatenation of its segments ``(file name, offset, size)``.  Each
segment file becomes one URL of the manifest.  Names are resolved the way HDF5 does with
``HDF5_EXTFILE_PREFIX=${ORIGIN}``: relative to the directory of the granule (``s3://`` granules
included); absolute local names are kept for local granules only.

The data are split into virtual chunks of whole rows so that no chunk straddles two segments:
the rows per chunk divide every segment boundary (their greatest common divisor, capped near
``contiguous_chunk_bytes``).  Segments that cut rows apart are skipped with a reason.
"""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5sidecar.errors import ErrorKind, SourceNotFoundError
from h5sidecar.indexer._failures import dcpl, fail
from h5sidecar.indexer.layout._chunk_table import ChunkTable

__all__ = ["Segment", "external_segments", "external_table", "resolve_external"]

#: Size HDF5 records for an external segment that may grow without bound.
_UNLIMITED = 2**64 - 1


@dataclass(frozen=True)
class Segment:
    """One external segment: ``size`` bytes at ``offset`` in the file ``name``."""

    name: str
    offset: int
    size: int


def external_segments(dset: h5py.Dataset) -> list[Segment]:
    """The external segments of ``dset`` in order (empty when it has none)."""
    plist = dcpl(dset)
    out = []
    for i in range(plist.get_external_count()):
        name, offset, size = plist.get_external(i)
        text = name.decode("utf-8", "surrogateescape") if isinstance(name, bytes) else str(name)
        out.append(Segment(text, int(offset), int(size)))
    return out


def resolve_external(name: str, granule_url: str) -> str:
    """The URL of an external raw-data file named ``name`` in the granule ``granule_url``."""
    if granule_url.startswith("s3://"):
        if name.startswith("/"):
            fail(
                ErrorKind.EXTERNAL_STORAGE,
                f"the raw data file {name!r} is an absolute local path, which cannot be resolved "
                f"next to {granule_url}; store it beside the granule under a relative name",
            )
        base = posixpath.dirname(granule_url[len("s3://") :])
        return "s3://" + posixpath.normpath(posixpath.join(base, name))
    if os.path.isabs(name):
        return os.path.normpath(name)
    return os.path.normpath(os.path.join(os.path.dirname(granule_url), name))


def _rows_per_chunk(bounds_rows: list[int], n_rows: int, row_bytes: int, target: int) -> int:
    step = 0
    for b in bounds_rows:
        step = math.gcd(step, b)
    step = math.gcd(step, n_rows) if n_rows else step
    step = step or max(n_rows, 1)
    # the largest divisor of ``step`` not above the target keeps chunks inside segments
    want = max(1, target // max(row_bytes, 1))
    best = 1
    for d in range(1, math.isqrt(step) + 1):
        if step % d == 0:
            for cand in (d, step // d):
                if cand <= want:
                    best = max(best, cand)
    return best


def external_table(
    dset: h5py.Dataset,
    shape: tuple[int, ...],
    itemsize: int,
    granule_url: str,
    target: int,
    identity: Callable[[str], Mapping[str, Any]],
) -> ChunkTable:
    """References of an externally stored dataset (see the module docstring).

    Parameters
    ----------
    identity : callable
        ``identity(url)`` returns ``{"size": int}`` of a raw data file, raising
        :class:`~h5sidecar.errors.SourceNotFoundError` when it does not exist.
    """
    segments = external_segments(dset)
    urls = [resolve_external(s.name, granule_url) for s in segments]
    shape_c = tuple(max(s, 1) for s in shape) or ()
    row_bytes = itemsize * (math.prod(shape[1:]) if shape else 1)
    n_rows = shape[0] if shape else 1
    total = n_rows * row_bytes
    if total == 0:
        return ChunkTable.empty(shape, shape_c, urls[:1])
    # cumulative boundaries of the segments actually needed
    bounds, starts, pos = [], [], 0
    for seg in segments:
        starts.append(pos)
        size = total - pos if seg.size == _UNLIMITED else seg.size
        pos += size
        if pos >= total:
            break
        bounds.append(pos)
    if pos < total:
        fail(
            ErrorKind.EXTERNAL_STORAGE,
            f"the external segments hold {pos} bytes, the data need {total}",
        )
    if any(b % row_bytes for b in bounds):
        fail(
            ErrorKind.EXTERNAL_STORAGE,
            "an external segment boundary falls inside a row of the array, so no chunking keeps "
            "chunks inside one file",
        )
    needed = len(starts)
    for url, seg in zip(urls[:needed], segments[:needed], strict=True):
        try:
            size = int(identity(url)["size"])
        except SourceNotFoundError:
            fail(
                ErrorKind.EXTERNAL_STORAGE,
                f"the raw data file {url} does not exist (named "
                f"{seg.name!r} in the dataset); put it beside the granule",
            )
        end = seg.offset + (seg.size if seg.size != _UNLIMITED else total)
        if size < min(end, seg.offset + total):
            fail(
                ErrorKind.EXTERNAL_STORAGE,
                f"the raw data file {url} has {size} bytes, the dataset needs bytes up to {end}",
            )
    rows = _rows_per_chunk([b // row_bytes for b in bounds], n_rows, row_bytes, target)
    if not shape:
        rows = 1
    chunks = (rows, *shape_c[1:]) if shape else ()
    table = ChunkTable.empty(shape, chunks, urls[:needed])
    k = max(table.grid[0], 1) if shape else 1
    chunk_bytes = rows * row_bytes
    starts_arr = np.asarray(starts, dtype=np.int64)
    for i in range(k):
        begin = i * chunk_bytes
        s = int(np.searchsorted(starts_arr, begin, side="right") - 1)
        index = (i,) if shape else ()
        table.codes[index] = s
        table.offsets[index] = segments[s].offset + (begin - starts[s])
        table.lengths[index] = chunk_bytes
    return table
