"""Verify a sidecar: decode chunks through it with plain zarr and compare with h5py on the source.

The sidecar is read the way any kerchunk consumer reads it (fsspec ``reference://`` + zarr), so a
pass means plain tools get the right values, not only h5sidecar's own reader.  A compact Parquet
sidecar, which plain tools cannot read, is read through h5sidecar's store instead (the report's
``reader`` says which).  Checks:

1. the source still has the identity recorded at index time (size + ETag/mtime);
2. for ``sample`` chunks per variable (all with ``sample=0``), values decoded through the sidecar
   equal what h5py reads from the source;
3. where the sidecar records chunk checksums, the referenced bytes still hash to them;
4. for the same chunks, the CF-decoded values plain xarray gives through the sidecar equal what
   xarray + h5netcdf gives from the source (masking, packing, times), when h5netcdf is
   installed;
5. each variable has the dimension names, coordinate and index status xarray + h5netcdf gives
   it (values compare by position, so a renamed dimension would pass 2-4), when h5netcdf is
   installed; see :mod:`h5sidecar.workflows.checks._dimcheck` for the renaming that is allowed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import fsspec
import h5py
import hdf5plugin  # noqa: F401  (registers HDF5 filter plugins for the h5py side)
import numpy as np
import zarr
from zarr.storage import FsspecStore

from h5sidecar.dest._locations import filesystem, is_remote
from h5sidecar.errors import InvalidReferenceError, SourceNotFoundError
from h5sidecar.indexer import chunk_hash
from h5sidecar.references import (
    MISSING,
    ArrayRefs,
    GranuleRefs,
    SourceInfo,
    read_layout,
    read_refs,
)
from h5sidecar.sources._urls import normalize_url
from h5sidecar.workflows.checks._cfcheck import decoded_differences
from h5sidecar.workflows.checks._compare import h5_dataset, read_h5_region, values_equal
from h5sidecar.workflows.checks._dimcheck import sidecar_dimension_differences
from h5sidecar.workflows.checks._plain_parquet import NullKeepingReferenceMapper
from h5sidecar.workflows.listing._listing import identity_from_info

__all__ = ["VariableCheck", "VerifyReport", "verify_refs"]

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


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Outcome of :func:`verify_refs`.

    Attributes
    ----------
    ref : str
    recorded, current : SourceInfo
        Source identity in the sidecar and as found now.
    variables : tuple of VariableCheck
    reader : "fsspec" or "h5sidecar"
        What decoded the chunks: plain fsspec ``reference://`` + zarr, or h5sidecar's store
        (compact Parquet sidecars, which plain tools cannot read).
    """

    ref: str
    recorded: SourceInfo
    current: SourceInfo
    variables: tuple[VariableCheck, ...]
    reader: Literal["fsspec", "h5sidecar"] = "fsspec"

    @property
    def source_changed(self) -> bool:
        """True when the source's size or ETag/mtime differs from the recorded identity."""
        return not self.recorded.same_object(self.current)

    @property
    def ok(self) -> bool:
        """True when the source is unchanged and no checked variable differed or failed."""
        bad = {"different", "error"}
        return not self.source_changed and not any(v.status in bad for v in self.variables)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``h5sidecar verify --json``)."""
        return {
            "ref": self.ref,
            "ok": self.ok,
            "reader": self.reader,
            "source_changed": self.source_changed,
            "recorded": self.recorded.to_dict(),
            "current": self.current.to_dict(),
            "variables": [v.to_dict() for v in self.variables],
        }


def verify_refs(
    ref: str,
    *,
    sample: int = 3,
    seed: int = 0,
    storage_options: Mapping[str, Any] | None = None,
) -> VerifyReport:
    """Decode chunks through a sidecar and compare them with h5py reading the source.

    Parameters
    ----------
    ref : str
        A ``.parq`` or ``.json`` sidecar, local or on S3.
    sample : int
        Chunks checked per variable, drawn at random among the stored ones (plus one
        unallocated chunk when there is any); 0 checks every chunk.
    seed : int
        Seed of the random draw (the same seed checks the same chunks).
    storage_options : mapping, optional
        fsspec/s3fs options for the sidecar and the source.

    Returns
    -------
    VerifyReport
        ``report.ok`` is false when the source changed, or any variable differs or fails to
        decode.
    """
    ref = normalize_url(ref)
    opts = dict(storage_options) if storage_options else None
    refs = read_refs(ref, storage_options=opts)
    src = refs.source.url
    current = _current_identity(src, ref, opts)
    rng = np.random.default_rng(seed)
    compact = read_layout(ref, storage_options=opts) == "compact"
    group = _open_own(refs, opts) if compact else _open_plain(ref, refs, opts)
    chosen: dict[str, list[tuple[int, ...]]] = {}

    def pick(arr: ArrayRefs) -> list[tuple[int, ...]]:
        # the chunks of checks 2-4, drawn once (check 4 compares the same ones)
        chosen[arr.path] = _choose_chunks(arr, sample, rng)
        return chosen[arr.path]

    with _open_h5(src, opts) as h5:
        checks = [
            _check_array(arr, group, h5, pick, ref, opts, current)
            for arr in refs.arrays.values()
        ]
        decoded = _decoded_check(refs, group, src, opts, chosen, h5)
    dims = _dimension_check(refs, group, src, opts)
    checks = [_with_decoded(c, decoded.get(c.path) or dims.get(c.path)) for c in checks]
    checks += [
        VariableCheck(s.path, "skipped", message=f"{s.kind}: {s.reason}") for s in refs.skipped
    ]
    return VerifyReport(
        ref=ref,
        recorded=refs.source,
        current=current,
        variables=tuple(checks),
        reader="h5sidecar" if compact else "fsspec",
    )


def _decoded_check(
    refs: GranuleRefs,
    group: zarr.Group,
    src: str,
    opts: dict[str, Any] | None,
    chosen: dict[str, list[tuple[int, ...]]],
    h5: h5py.File,
) -> dict[str, str]:
    """Check 4: CF-decoded values through plain xarray equal xarray + h5netcdf's on the source
    (the same chunks as check 2).  Skipped when h5netcdf is not installed."""
    try:
        import h5netcdf  # noqa: F401
    except ImportError:
        return {}
    regions = {
        path: [_region(refs.arrays[path], index) for index in indices]
        for path, indices in chosen.items()
        if indices and indices != [()]  # 0-d: compared whole below
    }
    regions.update({p: [()] for p, i in chosen.items() if i == [()]})

    def resolve(r: Any) -> str:
        return h5[r].name if isinstance(r, h5py.Reference) and r else str(r)

    with contextlib.ExitStack() as stack:
        source: Any = src
        if is_remote(src):
            source = stack.enter_context(fsspec.open(src, "rb", **(opts or {})))
        return decoded_differences(group.store, source, list(refs.groups), regions, resolve)


def _dimension_check(
    refs: GranuleRefs, group: zarr.Group, src: str, opts: dict[str, Any] | None
) -> dict[str, str]:
    """Check 5: dimension names and coordinates through plain xarray equal xarray + h5netcdf's
    on the source.  Skipped when h5netcdf is not installed."""
    try:
        import h5netcdf  # noqa: F401
    except ImportError:
        return {}
    with contextlib.ExitStack() as stack:
        source: Any = src
        if is_remote(src):
            source = stack.enter_context(fsspec.open(src, "rb", **(opts or {})))
        return sidecar_dimension_differences(group.store, source, list(refs.groups))


def _with_decoded(check: VariableCheck, problem: str | None) -> VariableCheck:
    if problem is None or check.status != "ok":
        return check
    return dataclasses.replace(check, status="different", message=problem)


def _current_identity(src: str, ref: str, opts: dict[str, Any] | None) -> SourceInfo:
    try:
        info = filesystem(src, opts).info(src)
    except FileNotFoundError as exc:
        raise SourceNotFoundError(
            f"the source {src} that {ref} references no longer exists: restore it, or delete "
            "the sidecar (and re-index the source from its new place)"
        ) from exc
    return identity_from_info(src, info)


def _open_plain(ref: str, refs: GranuleRefs, opts: dict[str, Any] | None) -> zarr.Group:
    """The sidecar as plain kerchunk consumers open it: fsspec reference:// + zarr (v2)."""
    remote = "s3" if refs.source.url.startswith("s3://") else "file"
    remote_options: dict[str, Any] = dict(opts or {}) if remote == "s3" else {}
    remote_options["asynchronous"] = remote == "s3"
    fo: Any = ref
    ref_fs = filesystem(ref, opts)
    if ref_fs.isdir(ref):
        # fsspec's lazy Parquet reader, decoding record files without pandas: its default
        # engine (fastparquet) is not a dependency, and its pyarrow engine under pandas >= 3
        # reads a missing chunk as a NaN URL and fails (see _plain_parquet)
        fo = NullKeepingReferenceMapper(ref, fs=ref_fs)
    so: dict[str, Any] = {"fo": fo, "remote_protocol": remote, "remote_options": remote_options}
    if is_remote(ref):
        so["target_options"] = dict(opts or {})
    store = FsspecStore.from_url("reference://", storage_options=so, read_only=True)
    return zarr.open_group(store, mode="r", zarr_format=2)


def _open_own(refs: GranuleRefs, opts: dict[str, Any] | None) -> zarr.Group:
    """A compact sidecar through h5sidecar's store (Zarr v2 view, as plain tools would see it
    from the kerchunk layout); plain fsspec cannot read it."""
    from h5sidecar.read.store import SidecarStore

    store = SidecarStore(refs, storage_options=opts, chunk_cache=None)
    return zarr.open_group(store, mode="r", zarr_format=2)


@contextlib.contextmanager
def _open_h5(url: str, opts: dict[str, Any] | None) -> Iterator[h5py.File]:
    """h5py on the source: a local path directly, a remote object through fsspec."""
    if not is_remote(url):
        with h5py.File(url, "r") as f:
            yield f
        return
    with fsspec.open(url, "rb", **(opts or {})) as raw, h5py.File(raw, "r") as f:
        yield f


def _choose_chunks(arr: ArrayRefs, sample: int, rng: np.random.Generator) -> list[tuple[int, ...]]:
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


def _region(arr: ArrayRefs, index: tuple[int, ...]) -> tuple[slice, ...]:
    shape, chunks = arr.meta.shape, arr.meta.chunks
    return tuple(
        slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, shape, strict=True)
    )


def _check_array(
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
            region = _region(arr, index)
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
