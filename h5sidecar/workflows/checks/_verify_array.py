"""Verify one variable of a sidecar: its sampled chunks read through the sidecar against h5py,
its shape, its chunk references within the source, and its recorded checksums.

The per-variable half of :func:`~._verify.verify_refs`, which opens the sidecar and the source
once and runs these for each variable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import fsspec
import h5py
import numpy as np
import zarr

from h5sidecar.dest import filesystem, is_remote
from h5sidecar.errors import InvalidReferenceError
from h5sidecar.indexer import chunk_hash
from h5sidecar.references import MISSING, ArrayRefs, SourceInfo
from h5sidecar.workflows.checks._compare import h5_dataset, read_h5_region, values_equal

__all__ = ["CheckStatus", "VariableCheck", "check_array", "choose_chunks", "chunk_region"]

log = logging.getLogger("h5sidecar.workflows")

CheckStatus = Literal["ok", "different", "error", "skipped"]


@dataclass(frozen=True, slots=True)
class VariableCheck:
    """Result of verifying one variable.

    Attributes
    ----------
    path : str
    status : "ok", "different", "error" or "skipped"
    chunks_checked, chunks_total : int
    mismatched : int
        Chunks whose decoded values differ from h5py's.
    checksums_checked, checksums_failed : int
    message : str
        What differed or failed (first problem), or why the variable was skipped.
    """

    path: str
    status: CheckStatus
    chunks_checked: int = 0
    chunks_total: int = 0
    mismatched: int = 0
    checksums_checked: int = 0
    checksums_failed: int = 0
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "path": self.path,
            "status": self.status,
            "chunks_checked": self.chunks_checked,
            "chunks_total": self.chunks_total,
            "mismatched": self.mismatched,
            "checksums_checked": self.checksums_checked,
            "checksums_failed": self.checksums_failed,
            "message": self.message,
        }


def choose_chunks(arr: ArrayRefs, sample: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
    """Chunk indices to check: ``sample`` held chunks at random (all if 0) + one missing chunk."""
    codes = arr.manifest.codes
    if codes.ndim == 0:
        return [()]
    held = np.flatnonzero(codes.reshape(-1) != MISSING)
    missing = np.flatnonzero(codes.reshape(-1) == MISSING)
    if sample <= 0:
        flat = np.arange(codes.size)
    else:
        flat = rng.choice(held, size=min(sample, held.size), replace=False) if held.size else held
        if missing.size:
            flat = np.append(flat, rng.choice(missing))
    return [tuple(int(i) for i in np.unravel_index(int(k), codes.shape)) for k in np.sort(flat)]


def chunk_region(arr: ArrayRefs, index: tuple[int, ...]) -> tuple[slice, ...]:
    """The region of the array that chunk ``index`` covers (clipped at the array's edge)."""
    shape, chunks = arr.meta.shape, arr.meta.chunks
    return tuple(
        slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, shape, strict=True)
    )


def check_array(
    arr: ArrayRefs,
    group: zarr.Group,
    h5: h5py.File,
    pick: Callable[[ArrayRefs], list[tuple[int, ...]]],
    ref: str,
    opts: dict[str, Any] | None,
    current: SourceInfo,
) -> VariableCheck:
    total, indices = 0, []
    mismatched, first = 0, ""
    try:
        # a lazily read manifest is validated here (e.g. a chunk past the end of the source):
        # a bad one is this variable's error, not the end of the verification
        total = arr.manifest.n_chunks
        indices = pick(arr)
        _check_within(arr, current)
        zarr_arr = group[arr.path]
        if not isinstance(zarr_arr, zarr.Array):
            raise InvalidReferenceError(f"{arr.path} is a group in the sidecar, not an array")
        dset = h5_dataset(h5, arr.path)
        shape_problem = _shape_difference(arr, dset, remote=is_remote(current.url))
        if shape_problem:
            return VariableCheck(arr.path, "different", chunks_total=total, message=shape_problem)
        for index in indices:
            region = chunk_region(arr, index)
            expected = read_h5_region(dset, region)
            actual = zarr_arr[region] if region else zarr_arr[...]
            if not values_equal(expected, np.asarray(actual), file=h5):
                mismatched += 1
                first = first or f"chunk {index}: values differ from h5py"
        n_sum, n_bad, sum_msg = _check_checksums(arr, indices, ref, opts)
    except Exception as exc:
        # verification reports every failure per variable (zlib/blosc errors, KeyError for a
        # missing key, OSError, ...) instead of stopping at the first: the point is to list
        # everything that is wrong with the sidecar
        log.debug("verifying %s failed", arr.path, exc_info=True)
        return VariableCheck(
            arr.path,
            "error",
            chunks_checked=len(indices),
            chunks_total=total,
            message=f"{type(exc).__name__}: {exc}",
        )
    bad = mismatched or n_bad
    return VariableCheck(
        arr.path,
        "different" if bad else "ok",
        chunks_checked=len(indices),
        chunks_total=total,
        mismatched=mismatched,
        checksums_checked=n_sum,
        checksums_failed=n_bad,
        message=first or sum_msg,
    )


def _shape_difference(arr: ArrayRefs, dset: h5py.Dataset, *, remote: bool) -> str:
    """Why the sidecar's shape is not h5py's, or "" (an empty or truncated array has no
    chunks to compare, so the chunk checks alone would pass it).

    Dimensions past the dataset's rank hold H5T_ARRAY elements.  A virtual dataset read from a
    file object is not compared: HDF5 finds no source there and reports the stored extent.
    """
    if dset.shape is None:  # null dataspace
        return ""
    if remote and dset.id.get_create_plist().get_layout() == h5py.h5d.VIRTUAL:
        return ""
    got = tuple(arr.meta.shape[: dset.ndim])
    if got == tuple(dset.shape):
        return ""
    return f"shape {got} in the sidecar, {tuple(dset.shape)} in h5py"


def _check_within(arr: ArrayRefs, current: SourceInfo) -> None:
    """Refuse the variable when a chunk lies past the end of the source (a corrupt chunk index
    indexed by an older version, or a sidecar edited since), naming the first such chunk."""
    manifest = arr.manifest
    if current.url not in manifest.urls:
        return
    mine = manifest.codes == manifest.urls.index(current.url)
    ends = manifest.offsets + manifest.lengths
    outside = mine & (ends > np.uint64(current.size))
    if outside.any():
        index = tuple(int(i) for i in np.argwhere(outside)[0])
        raise InvalidReferenceError(
            f"{int(outside.sum())} chunk reference(s) lie past the end of the source "
            f"({current.size} bytes), the first, chunk {index}, at bytes "
            f"{int(manifest.offsets[index])}+{int(manifest.lengths[index])}: a corrupt chunk "
            "index; re-index the granule (this variable is then skipped with the reason)"
        )


def _check_checksums(
    arr: ArrayRefs, indices: list[tuple[int, ...]], ref: str, opts: dict[str, Any] | None
) -> tuple[int, int, str]:
    """Hash the bytes each checked chunk references and compare with the recorded checksum."""
    if arr.checksums is None:
        return 0, 0, ""
    checked = failed = 0
    message = ""
    fss: dict[str, fsspec.AbstractFileSystem] = {}
    for index in indices:
        recorded = int(arr.checksums[index]) if index else int(arr.checksums[()])
        chunk_ref = arr.manifest.get(index)
        if recorded == 0 or chunk_ref is None:
            continue
        if isinstance(chunk_ref, bytes):
            data = chunk_ref
        else:
            url, offset, length = chunk_ref
            fs = fss.setdefault(url, filesystem(url, opts))
            data = fs.cat_file(url, start=offset, end=offset + length)
        checked += 1
        if chunk_hash(data) != recorded:
            failed += 1
            message = message or f"chunk {index}: bytes in the source no longer match the checksum"
    return checked, failed, message
