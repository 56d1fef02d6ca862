"""One open granule -> :class:`~h5sidecar.references.GranuleRefs`."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import h5py

from h5sidecar.errors import ErrorKind, H5SidecarError, NotHDF5Error, UnsupportedFeatureError
from h5sidecar.indexer._checksums import manifest_checksums
from h5sidecar.indexer._dataset import IndexContext, index_alias, index_dataset
from h5sidecar.indexer._failures import (
    H5PY_ERRORS,
    Skip,
    dcpl,
    describe_h5_error,
    raised_by_h5py,
    reraise_io_failure,
)
from h5sidecar.indexer._summary import SUMMARY_KEY, add_summary
from h5sidecar.indexer._walk import DatasetEntry, ObjectKey, model_path, object_key, walk
from h5sidecar.indexer.attrs._native import NativeAttrs
from h5sidecar.indexer.attrs._zarr_attrs import read_attrs
from h5sidecar.indexer.crawl._h5file import OpenGranule, open_granule
from h5sidecar.indexer.crawl._hints import BadStructure
from h5sidecar.indexer.dims._dim_names import DimensionNamer
from h5sidecar.indexer.dtypes._dtype_plan import ENUMS_KEY, REFERENCES_KEY, enum_mapping
from h5sidecar.indexer.vds._table import vds_extent
from h5sidecar.references import DIMENSION_ONLY_REASON, ArrayRefs, GranuleRefs, Skipped
from h5sidecar.settings import IndexSettings
from h5sidecar.sources import RangedFile, RangeReader, RemoteRangedFile

__all__ = ["BENIGN_KINDS", "EXTENDED_KEY", "index_open_granule", "skip_loses_data"]

#: extras key: array path -> HDF5's extent, of the arrays shown at the length of their
#: unlimited dimensions, longer than HDF5 holds them (see ``dims._unlimited_dims``)
EXTENDED_KEY = "extended_past_hdf5_extent"
#: datasets on an unlimited dimension kept at their HDF5 extent, and why (``dims._unlimited_dims``)
KEPT_KEY = "kept_hdf5_extent"

log = logging.getLogger("h5sidecar.indexer")

#: Skips that lose no data (a dangling link has none); ``on_unsupported="raise"`` ignores them.
BENIGN_KINDS = frozenset({ErrorKind.SOFT_LINK_DANGLING})

#: Reasons starting like this lose no data either (duplicates, dimension-only datasets).
_BENIGN_PREFIXES = (
    "second hard link to the group",
    "soft link to the group",
    DIMENSION_ONLY_REASON,
    "the dataset has a null dataspace",
)


def _benign(skip: Skipped) -> bool:
    return not skip_loses_data(skip.kind, skip.reason)


def skip_loses_data(kind: str, reason: str) -> bool:
    """Whether a skip record leaves data out (False for entries that hold none: a second link
    to a group, a netCDF-4 dimension without a variable, a null dataspace, a dangling link)."""
    return not (kind in BENIGN_KINDS or reason.startswith(_BENIGN_PREFIXES))


class _Dereferencer:
    """Object references -> target path / object key, within one file."""

    def __init__(self, h5: h5py.File, canonical: Mapping[ObjectKey, str]) -> None:
        self._h5 = h5
        self._canonical = canonical

    def _open(self, ref: h5py.Reference) -> h5py.HLObject | None:
        try:
            return self._h5[ref]
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            return None

    def key(self, ref: h5py.Reference) -> ObjectKey | None:
        obj = self._open(ref)
        return None if obj is None else object_key(obj)

    def path(self, ref: h5py.Reference) -> str | None:
        """The target's absolute HDF5 path (its first name in link order)."""
        obj = self._open(ref)
        if obj is None:
            return None
        first = self._canonical.get(object_key(obj))
        if first is not None:
            return "/" + first
        return model_path(obj.name)  # bytes when a name on the path is not UTF-8


def _record(skip: Skip, path: str, settings: IndexSettings) -> Skipped:
    record = Skipped(path, skip.kind, skip.reason)
    if settings.on_unsupported == "raise" and not _benign(record):
        raise UnsupportedFeatureError(
            f"{path}: {skip.reason} [{skip.kind}]; index with on_unsupported='skip' to record it "
            "as skipped and keep the other variables"
        ) from skip
    return record


def _failure(exc: Exception, path: str, settings: IndexSettings) -> Skipped:
    """The record of a variable whose indexing raised ``exc`` (or re-raise it).

    A source read failure aborts the granule (its other variables cannot be read either); an
    error HDF5 raised about this dataset is ``unreadable``; anything else is an error of
    h5sidecar itself (``internal_error``): one variable must not sink the granule, so it is
    recorded with the error and where it happened, the rest of the granule is indexed and the
    granule is reported as partial.  ``on_unsupported="raise"`` re-raises it unchanged.
    """
    if isinstance(exc, H5PY_ERRORS):
        reraise_io_failure(exc)
        if raised_by_h5py(exc):
            failed = Skip(ErrorKind.UNREADABLE, f"HDF5 failed on it: {describe_h5_error(exc)}")
            return _record(failed, path, settings)
    if isinstance(exc, (H5SidecarError, MemoryError)) or settings.on_unsupported == "raise":
        raise exc
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    log.warning("indexing %s failed with an unexpected error", path, exc_info=exc)
    return Skipped(
        path,
        ErrorKind.INTERNAL_ERROR,
        f"an unexpected error inside h5sidecar{where} ({describe_h5_error(exc)}); the rest of "
        "the granule was indexed: report this with the file, or index with "
        "on_unsupported='raise' to get the traceback",
    )


def _shape_of(
    url: str, open_h5: Callable[[str], h5py.File]
) -> Callable[[DatasetEntry], tuple[int, ...]]:
    """Dataset shapes as h5netcdf sees them: a virtual dataset's extent is worked out from its
    sources (HDF5 cannot find them for a file object, so ``dset.shape`` may say 0).  Each is
    worked out once: the dimension namer asks twice per dataset (its group's phony dimensions,
    then its own names)."""
    shapes: dict[str, tuple[int, ...]] = {}

    def shape_of(entry: DatasetEntry) -> tuple[int, ...]:
        if entry.path not in shapes:
            shapes[entry.path] = _shape(entry)
        return shapes[entry.path]

    def _shape(entry: DatasetEntry) -> tuple[int, ...]:
        dset = entry.dset
        try:
            if dcpl(dset).get_layout() == h5py.h5d.VIRTUAL:
                return vds_extent(dset, url, open_h5)
            return tuple(dset.shape or ())
        except Skip:
            return tuple(dset.shape or ())  # the variable's own indexing records why
        except H5PY_ERRORS as exc:
            reraise_io_failure(exc)
            return ()

    return shape_of


def _describe_type(entry: DatasetEntry, out: dict[str, Any]) -> None:
    """Record what an enumeration's integers mean, and which arrays hold reference paths, in
    the granule's extras (``ENUMS_KEY``, ``REFERENCES_KEY``): not as attributes, which netCDF
    readers do not show either."""
    mapping = enum_mapping(entry.dset)
    if mapping:
        out.setdefault(ENUMS_KEY, {})[entry.path] = mapping
    dt = entry.dset.dtype
    if h5py.check_ref_dtype(dt.subdtype[0] if dt.subdtype is not None else dt) is h5py.Reference:
        out.setdefault(REFERENCES_KEY, []).append(entry.path)


def _check_links(skipped: list[Skipped], settings: IndexSettings) -> None:
    if settings.on_unsupported != "raise":
        return
    for record in skipped:
        if not _benign(record):
            raise UnsupportedFeatureError(
                f"{record.path}: {record.reason} [{record.kind}]; index with "
                "on_unsupported='skip' to record it as skipped and keep the other variables"
            )


def index_open_granule(
    granule: OpenGranule,
    settings: IndexSettings,
    storage_options: Mapping[str, Any] | None = None,
) -> GranuleRefs:
    """Index every group and dataset of an open granule (see :func:`index_granule`)."""
    started = time.perf_counter()
    hierarchy = walk(granule.h5)
    _check_links(hierarchy.skipped, settings)
    deref = _Dereferencer(granule.h5, hierarchy.canonical)
    reader = RangeReader(granule.fileobj, storage_options, retries=settings.source_retries,
                         backoff=settings.source_backoff)  # fmt: skip
    others = contextlib.ExitStack()
    opened: dict[str, h5py.File] = {granule.identity.url: granule.h5}

    def open_h5(url: str) -> h5py.File:
        if url not in opened:
            other = open_granule(url, storage_options=storage_options, settings=settings)
            opened[url] = others.enter_context(other).h5
        return opened[url]

    native = _native_attrs(granule, hierarchy.infos)
    if native is not None:
        # before the dimension namer asks for the first layout: every later creation property
        # (layout, chunks, filters, fill value) comes from the header bytes where decoded
        for entry in hierarchy.datasets:
            if entry.alias_of is None:
                native.attach_creation(entry.dset)
    lookup = native.lookup if native is not None else None
    dimension_list = native.dimension_list if native is not None else None
    ctx = IndexContext(
        url=granule.identity.url,
        file_size=granule.identity.size,
        settings=settings,
        dims=DimensionNamer(
            hierarchy, deref.key, _shape_of(granule.identity.url, open_h5), lookup, dimension_list
        ),
        deref=deref.path,
        identity=reader.identity,
        read_many=reader.read_many,
        open_h5=open_h5,
        native_attrs=native,
    )
    groups: dict[str, dict[str, Any]] = {}
    dropped: dict[str, dict[str, str]] = {}
    escaped: dict[str, list[str]] = {"links": list(hierarchy.escaped)}
    for gpath, group in hierarchy.groups:
        result = read_attrs(group, deref.path, native=ctx.native_attrs)
        groups[gpath] = result.attrs
        if result.types:
            ctx.attribute_dtypes[gpath] = result.types
        if result.dropped:
            dropped[gpath] = result.dropped
        if result.escaped:
            escaped.setdefault("group_attributes", []).extend(
                f"{gpath}/{name}" if gpath else name for name in result.escaped
            )
    arrays: dict[str, ArrayRefs] = {}
    described: dict[str, Any] = {}  # enums and object references, see _describe_type
    skipped = list(hierarchy.skipped)
    by_path: dict[str, Skipped] = {}
    summaries: dict[str, Any] = {}  # coordinate summaries for the catalog, see _summary
    # only where values are one local read away: over a network HDF5 would fetch them one
    # variable at a time, outside the metadata prefetch (52 requests in a row on an ATL03-like
    # granule); the catalog reads those itself
    summarise = not isinstance(granule.fileobj, RemoteRangedFile)
    try:
        for entry in hierarchy.datasets:
            try:
                if entry.alias_of is not None and entry.alias_of in arrays:
                    arr = index_alias(entry, arrays[entry.alias_of], ctx)
                elif entry.alias_of is not None and entry.alias_of in by_path:
                    first = by_path[entry.alias_of]
                    raise Skip(first.kind, f"another name of {entry.alias_of!r}: {first.reason}")
                else:
                    arr = index_dataset(entry, ctx)
                if settings.checksums:
                    arr = dataclasses.replace(
                        arr, checksums=manifest_checksums(arr.manifest, reader.read_many)
                    )
                arrays[entry.path] = arr
                if entry.path not in ctx.numbers:
                    _describe_type(entry, described)
                if entry.alias_of is None and summarise:
                    add_summary(entry.path, entry.dset, arr.meta.attrs, summaries, lookup)
            except Skip as skip:
                by_path[entry.path] = _record(skip, entry.path, settings)
                skipped.append(by_path[entry.path])
            except Exception as exc:  # noqa: BLE001 - recorded per variable, see _failure
                by_path[entry.path] = _failure(exc, entry.path, settings)
                skipped.append(by_path[entry.path])
    finally:
        reader.close()
        others.close()
    # a local file rewritten while it was read would give references mixing two versions (S3
    # reads are pinned to one version by If-Match instead)
    check_unchanged = getattr(granule.fileobj, "check_unchanged", None)
    if check_unchanged is not None:
        check_unchanged()
    extra = _provenance(settings, time.perf_counter() - started, dropped)
    extra.update(described)
    if len(escaped) > 1 or escaped["links"]:
        extra["names_escaped"] = escaped  # see _walk.escape_name
    if ctx.attribute_dtypes:
        extra["attribute_dtypes"] = ctx.attribute_dtypes
    if ctx.extended:
        extra[EXTENDED_KEY] = ctx.extended
    if ctx.dims.kept_extent:
        extra[KEPT_KEY] = dict(ctx.dims.kept_extent)
    if summaries:
        extra[SUMMARY_KEY] = summaries
    return GranuleRefs(granule.identity, groups, arrays, tuple(skipped), extra)


def _native_attrs(
    granule: OpenGranule, infos: dict[int, tuple[h5py.HLObject, Any]]
) -> NativeAttrs | None:
    """The reader of attributes from the metadata bytes, ``None`` (all through h5py) when the
    granule is not read through one of the indexer's file objects or its superblock is odd."""
    if not isinstance(granule.fileobj, RangedFile):
        return None
    try:
        return NativeAttrs(granule.h5, granule.fileobj, infos=infos)
    except (NotHDF5Error, BadStructure):
        return None


def _provenance(
    settings: IndexSettings, seconds: float, dropped: dict[str, dict[str, str]]
) -> dict[str, Any]:
    from h5sidecar._version import __version__

    extra: dict[str, Any] = {
        "indexer": f"h5sidecar {__version__}",
        "h5py": h5py.version.version,
        "hdf5": h5py.version.hdf5_version,
        "settings": {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "index_seconds": round(seconds, 3),
    }
    if dropped:
        extra["group_attributes_left_out"] = dropped
    return extra
