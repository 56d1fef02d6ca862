"""A parsed DMR++ -> :class:`~h5sidecar.references.GranuleRefs`, the sidecar the HDF5 indexer
would write for the same file.

What build_dmrpp adds that the HDF5 file does not hold is left out: the ``origname`` and
``fullnamepath`` attributes (the latter gives back the HDF5 path where build_dmrpp replaced
characters in a name, so arrays and groups keep the file's names), the root's
``build_dmrpp_metadata`` container (kept in the provenance instead), and the bookkeeping
attributes of HDF5 dimension scales and netCDF-4 that netCDF readers hide.  Axes the document
leaves anonymous get the ``phony_dim_<n>`` names h5netcdf shows (numbered per group, on from
the parent group's numbers, each array's k-th axis of a length taking the k-th name of that
length).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from h5sidecar.errors import ErrorKind, UnsupportedFeatureError
from h5sidecar.indexer._failures import Skip
from h5sidecar.indexer.attrs._zarr_attrs import ALWAYS_DROPPED, SCALE_MARKERS
from h5sidecar.indexer.dims._dim_names import NETCDF_DIM_ONLY, PHONY
from h5sidecar.indexer.dmrpp._dap_types import attribute_value
from h5sidecar.indexer.dmrpp._dmrpp_document import (
    DmrAttribute,
    DmrDim,
    DmrGroup,
    DmrppDocument,
    DmrVariable,
)
from h5sidecar.indexer.dmrpp._dmrpp_variable import ArraySpec, UrlInfo, convert_variable
from h5sidecar.indexer.dmrpp._filter_order import ReadRanges
from h5sidecar.indexer.dmrpp._variable_type import Conversion
from h5sidecar.indexer.dtypes._dtype_plan import ENUMS_KEY
from h5sidecar.references import (
    DIMENSION_ONLY_REASON,
    ArrayRefs,
    GranuleRefs,
    Skipped,
    SourceInfo,
)
from h5sidecar.settings import IndexSettings

__all__ = ["BUILD_DMRPP_ONLY", "DMRPP_KEY", "dmrpp_refs"]

#: Attributes build_dmrpp writes that are not in the HDF5 file.
BUILD_DMRPP_ONLY = frozenset({"origname", "fullnamepath"})
#: The root attribute container where build_dmrpp describes itself.
_BUILD_METADATA = "build_dmrpp_metadata"
#: What of it the provenance keeps: versions and date (not the invocation or the server's
#: configuration, kilobytes naming the builder's machine).
_BUILD_FIELDS = ("build_dmrpp", "bes", "libdap", "created")
#: Key of ``GranuleRefs.extra`` saying the references came from a DMR++ (and which).
DMRPP_KEY = "from_dmrpp"
_DIM_ONLY_REASON = (
    f"{DIMENSION_ONLY_REASON}: HDF5 holds no values for it and netCDF readers "
    "hide it; its name is kept as a dimension name"
)


@dataclass
class _Attrs:
    values: dict[str, Any] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)


def _attributes(attrs: tuple[DmrAttribute, ...]) -> _Attrs:
    out = _Attrs()
    for a in attrs:
        if a.name in BUILD_DMRPP_ONLY or a.name in ALWAYS_DROPPED or a.name in SCALE_MARKERS:
            continue
        try:
            value, spec = attribute_value(a)
        except ValueError as exc:
            out.dropped[a.name] = str(exc)
            continue
        out.values[a.name] = value
        if spec is not None:
            out.types[a.name] = spec
    return out


def _fullname(var: DmrVariable) -> str | None:
    """The HDF5 path of a variable when the document gives it (``fullnamepath``)."""
    for a in var.attributes:
        if a.name == "fullnamepath" and a.values and a.values[0].startswith("/"):
            return a.values[0].strip("/") or None
    return None


def _group_renames(doc: DmrppDocument) -> dict[str, str]:
    """Document group path -> HDF5 group path, learned from the variables' ``fullnamepath``."""
    out: dict[str, str] = {}
    for var in doc.variables():
        full = _fullname(var)
        if full is None:
            continue
        dmr, real = var.path.split("/")[:-1], full.split("/")[:-1]
        if len(dmr) == len(real):
            for k in range(1, len(dmr) + 1):
                out.setdefault("/".join(dmr[:k]), "/".join(real[:k]))
    return out


def _renamed(path: str, renames: Mapping[str, str]) -> str:
    parent, _, name = path.rpartition("/")
    return f"{renames.get(parent, parent)}/{name}" if parent else name


class _Phony:
    """h5netcdf's names for anonymous axes, per group (see the module docstring)."""

    def __init__(self, doc: DmrppDocument) -> None:
        self._pools: dict[str, dict[int, list[str]]] = {}
        ends: dict[str, int] = {}  # group path -> the number after its last phony name
        for group in doc.root.walk():  # parents first: a group numbers on from its ancestors'
            # (not its siblings': h5netcdf gives /a and /b the same first number)
            n = ends[group.path.rpartition("/")[0]] if group.path else 0
            needed: Counter[int] = Counter()
            for var in sorted(group.variables, key=lambda v: v.name.encode()):
                needed |= Counter(d.size for d in var.dims if d.name is None)
            pools: dict[int, list[str]] = {}
            for size, count in needed.items():
                pools[size] = [PHONY.format(n + k) for k in range(count)]
                n += count
            self._pools[group.path] = pools
            ends[group.path] = n

    def names(self, var: DmrVariable, group: str, sizes: Mapping[str, int]) -> tuple[str, ...]:
        seen: Counter[int] = Counter()
        out = []
        for d in var.dims:
            if d.name is not None:
                out.append(d.name.rpartition("/")[2])
                continue
            out.append(self._pools[group][d.size][seen[d.size]])
            seen[d.size] += 1
        return tuple(out)


def _dimension_sizes(doc: DmrppDocument) -> dict[str, int]:
    return {
        f"/{g.path}/{name}".replace("//", "/"): size
        for g in doc.root.walk()
        for name, size in g.dimensions.items()
    }


def _is_dimension_only(var: DmrVariable) -> bool:
    return any(
        a.name == "NAME" and a.values and a.values[0].encode().startswith(NETCDF_DIM_ONLY)
        for a in var.attributes
    )


def dmrpp_refs(
    doc: DmrppDocument,
    source: SourceInfo,
    urls: Callable[[str], UrlInfo],
    settings: IndexSettings,
    provenance: Mapping[str, Any],
    *,
    byte_order: str | None = None,
    read: ReadRanges | None = None,
) -> GranuleRefs:
    """The references of a granule described by ``doc``.

    Parameters
    ----------
    doc : DmrppDocument
    source : SourceInfo
        The granule's identity (its URL is where the chunks without an ``href`` are).
    urls : callable
        A per-chunk ``href`` as written -> its resolved URL and size (``None``: not found).
    settings : IndexSettings
        ``on_unsupported``: "skip" records what cannot be represented, "raise" raises.
    provenance : mapping
        What to record under ``extra["from_dmrpp"]`` (the document's URL, ...).
    byte_order : "LE", "BE" or None
        The byte order to assume where the document gives none (default: skip those).
    read : callable, optional
        ``read(url, [(offset, length), ...])``: lets the conversion check a chunk where the
        document cannot be trusted (see :class:`~._variable_type.Conversion`).
    """
    renames = _group_renames(doc)
    sizes = _dimension_sizes(doc)
    phony = _Phony(doc)
    enums = doc.enumerations()
    ctx = Conversion(enums, byte_order, read, settings.materialize_limit)
    groups: dict[str, dict[str, Any]] = {}
    attribute_dtypes: dict[str, dict[str, str]] = {}
    left_out: dict[str, dict[str, str]] = {}
    built_by: dict[str, Any] = {}
    for group in doc.root.walk():
        path = renames.get(group.path, group.path)
        attrs = _attributes(_without_build_metadata(group, built_by))
        groups[path] = attrs.values
        if attrs.types:
            attribute_dtypes[path] = attrs.types
        if attrs.dropped:
            left_out[path] = attrs.dropped
    arrays: dict[str, ArrayRefs] = {}
    skipped: list[Skipped] = []
    described: dict[str, dict[str, int]] = {}
    for group in doc.root.walk():
        for var in group.variables:
            path = _fullname(var) or _renamed(var.path, renames)
            if _is_dimension_only(var):
                skipped.append(Skipped(path, ErrorKind.OTHER, _DIM_ONLY_REASON))
                continue
            try:
                arrays[path] = _convert(var, group, path, urls, sizes, phony, ctx,
                                        attribute_dtypes)  # fmt: skip
            except Skip as skip:
                if settings.on_unsupported == "raise":
                    raise UnsupportedFeatureError(
                        f"{path}: {skip.reason} [{skip.kind}]; index with on_unsupported='skip' "
                        "to record it as skipped and keep the other variables"
                    ) from skip
                skipped.append(Skipped(path, skip.kind, skip.reason))
                continue
            _, consts = enums.get(var.enum or "", ("", {}))
            if var.dap_type == "Enum" and arrays[path].meta.dtype != "|b1":
                described[path] = dict(consts)
    extra: dict[str, Any] = {**provenance}
    extra[DMRPP_KEY] = {
        **dict(extra.get(DMRPP_KEY, {})),
        **({"build_dmrpp": built_by} if built_by else {}),
    }
    if described:
        extra[ENUMS_KEY] = described
    if attribute_dtypes:
        extra["attribute_dtypes"] = attribute_dtypes
    if left_out:
        extra["group_attributes_left_out"] = left_out
    return GranuleRefs(source, groups, arrays, tuple(skipped), extra)


def _without_build_metadata(group: DmrGroup, built_by: dict[str, Any]) -> tuple[DmrAttribute, ...]:
    """The group's attributes without build_dmrpp's own (copied into ``built_by``)."""
    kept = []
    for a in group.attributes:
        if group.path == "" and a.name == _BUILD_METADATA:
            built_by.update({m.name: " ".join(m.values) for m in a.members
                             if m.name in _BUILD_FIELDS})  # fmt: skip
        else:
            kept.append(a)
    return tuple(kept)


def _convert(
    var: DmrVariable,
    group: DmrGroup,
    path: str,
    urls: Callable[[str], UrlInfo],
    sizes: Mapping[str, int],
    phony: _Phony,
    ctx: Conversion,
    attribute_dtypes: dict[str, dict[str, str]],
) -> ArrayRefs:
    shape = []
    for d in var.dims:
        size = d.size if d.size >= 0 else sizes.get(d.name or "", -1)
        if size < 0:
            raise Skip(ErrorKind.OTHER, f"dimension {d.name!r} is not declared in the document")
        shape.append(size)
    attrs = _attributes(var.attributes)
    note = ""
    if attrs.dropped:
        note = "attributes left out: " + ", ".join(f"{k} ({v})" for k, v in attrs.dropped.items())
    dims = tuple(shape)
    var = var if all(d.size >= 0 for d in var.dims) else _with_sizes(var, dims)
    spec = ArraySpec(path, dims, phony.names(var, group.path, sizes), attrs.values, note)
    chunk_urls = var.chunks.urls if var.chunks is not None else ()

    def url_of(i: int) -> UrlInfo:
        return urls("") if i < 0 else urls(chunk_urls[i])

    arr = convert_variable(var, spec, ctx, url_of)
    if attrs.types:
        attribute_dtypes[path] = attrs.types
    return arr


def _with_sizes(var: DmrVariable, shape: tuple[int, ...]) -> DmrVariable:
    """``var`` with the sizes of its shared dimensions filled in (``<Dim name=.../>``)."""
    return replace(var, dims=tuple(DmrDim(d.name, s) for d, s in zip(var.dims, shape, strict=True)))
