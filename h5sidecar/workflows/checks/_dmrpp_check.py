"""``check_dmrpp``: audit a DMR++ document against the granule it describes.

The granule is indexed twice -- from its HDF5 metadata and from the document -- and the two
reference sets are compared field by field: every disagreement is a finding.  What the
document does not carry by design is not one: build_dmrpp's own attributes (dropped by the
DMR++ indexer), a zlib level the document omits, the names it gives anonymous or HDF-EOS5
dimensions, and netCDF-4's ``_nc4_non_coord_`` prefix (the document gives the netCDF name).
Variables the DMR++ indexer skips are listed apart (``unchecked``): they are not read through
the document, so they cannot read wrong.

The HDF5 side is indexed with every chunk as a byte range (no inlining, no split of contiguous
data), the way a DMR++ lists them, so chunk offsets compare one to one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from h5sidecar.errors import InvalidDmrppError
from h5sidecar.references import ArrayRefs, GranuleRefs
from h5sidecar.settings import IndexSettings

__all__ = ["DmrppAudit", "DmrppFinding", "check_dmrpp"]

FindingKind = Literal[
    "invalid document", "missing from DMR++", "not in granule", "shape", "dtype",
    "chunk shape", "chunks", "filters", "fill value", "attribute",
]  # fmt: skip
_NON_COORD = "_nc4_non_coord_"
#: The HDF5 side as a DMR++ lists it: every chunk a byte range, contiguous data one chunk.
_AS_DMRPP = IndexSettings(inline_threshold=0, contiguous_chunk_bytes=2**62)


@dataclass(frozen=True, slots=True)
class DmrppFinding:
    """One disagreement between the document and the granule.

    Attributes
    ----------
    path : str
        The variable or group (``""``: the root group, or the whole document).
    kind : str
        What disagrees (``chunks``, ``filters``, ``attribute``, ...).
    detail : str
        The two sides: ``granule: ...; DMR++: ...``.
    """

    path: str
    kind: FindingKind
    detail: str

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form."""
        return {"path": self.path, "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class DmrppAudit:
    """What :func:`check_dmrpp` found.

    Attributes
    ----------
    granule, dmrpp : str
        The granule and the document audited.
    findings : tuple of DmrppFinding
        Every disagreement (empty: the document describes the granule).
    unchecked : tuple of (str, str)
        Variables the DMR++ indexer skips, with why (not read through the document).
    n_variables : int
        Variables compared.
    """

    granule: str
    dmrpp: str
    findings: tuple[DmrppFinding, ...] = ()
    unchecked: tuple[tuple[str, str], ...] = ()
    n_variables: int = 0

    @property
    def ok(self) -> bool:
        """No disagreement."""
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "granule": self.granule, "dmrpp": self.dmrpp, "ok": self.ok,
            "n_variables": self.n_variables,
            "findings": [f.to_dict() for f in self.findings],
            "unchecked": [{"path": p, "reason": r} for p, r in self.unchecked],
        }  # fmt: skip


def check_dmrpp(
    granule_url: str,
    dmrpp_url: str | None = None,
    *,
    byte_order: Literal["LE", "BE"] | None = None,
    allowed_prefixes: tuple[str, ...] = (),
    **storage_options: Any,
) -> DmrppAudit:
    """Audit a DMR++ document against its granule.

    Parameters
    ----------
    granule_url : str
        The HDF5 / netCDF-4 granule (local path, ``s3://``, ``https://``).
    dmrpp_url : str, optional
        The document; default ``granule_url + ".dmrpp"``.
    byte_order : "LE" or "BE", optional
        Passed to :func:`~h5sidecar.index_dmrpp` (documents without ``byteOrder``).
    allowed_prefixes : tuple of str
        Passed to :func:`~h5sidecar.index_dmrpp`.
    **storage_options
        s3fs-style options for both.

    Returns
    -------
    DmrppAudit
        ``ok`` when the document agrees with the granule in every variable it describes.
    """
    from h5sidecar.indexer import index_dmrpp, index_granule

    dmrpp_url = dmrpp_url or f"{granule_url}.dmrpp"
    hdf5 = index_granule(granule_url, storage_options=storage_options, settings=_AS_DMRPP)
    try:
        doc = index_dmrpp(dmrpp_url, granule_url, byte_order=byte_order,
                          allowed_prefixes=allowed_prefixes, **storage_options)  # fmt: skip
    except InvalidDmrppError as exc:  # a document contradicting the file is a finding too
        return DmrppAudit(granule_url, dmrpp_url, (DmrppFinding("", "invalid document", str(exc)),))
    return compare_refs(hdf5, doc, granule_url, dmrpp_url)


def compare_refs(hdf5: GranuleRefs, doc: GranuleRefs, granule: str, dmrpp: str) -> DmrppAudit:
    """The audit of ``doc`` (indexed from a DMR++) against ``hdf5`` (from the granule)."""
    findings: list[DmrppFinding] = []
    from h5sidecar.indexer import DMRPP_DRIFT, skip_loses_data

    # a variable skipped because its chunks contradict its type or filters is the document's error
    findings += [DmrppFinding(s.path, "chunks", s.reason) for s in doc.skipped
                 if DMRPP_DRIFT in s.reason]  # fmt: skip
    unchecked = tuple((s.path, f"{s.kind}: {s.reason}") for s in doc.skipped
                      if DMRPP_DRIFT not in s.reason)  # fmt: skip
    doc_skipped = {s.path for s in doc.skipped}

    hdf5_skipped = {s.path for s in hdf5.skipped if skip_loses_data(s.kind, s.reason)}
    types_h = hdf5.extra.get("attribute_dtypes", {})
    types_d = doc.extra.get("attribute_dtypes", {})
    seen: set[str] = set()
    for path, arr in doc.arrays.items():
        hp = _hdf5_path(path, hdf5)
        seen.add(hp)
        if hp not in hdf5.arrays:
            if hp not in hdf5_skipped and hp not in {s.path for s in hdf5.skipped}:
                findings.append(DmrppFinding(path, "not in granule",
                                             "the DMR++ describes a variable the granule does "
                                             "not hold"))  # fmt: skip
            continue
        findings += _array_findings(path, arr, hdf5.arrays[hp])
        findings += _attr_findings(path, arr.meta.attrs, hdf5.arrays[hp].meta.attrs,
                                   types_d.get(path, {}), types_h.get(hp, {}))  # fmt: skip
    for hp in [*hdf5.arrays, *hdf5_skipped]:
        if hp not in seen and hp not in doc_skipped and _netcdf_name(hp) not in doc_skipped:
            findings.append(DmrppFinding(hp, "missing from DMR++",
                                         "a variable of the granule the DMR++ does not "
                                         "describe"))  # fmt: skip
    for group, attrs in doc.groups.items():
        if group in hdf5.groups:
            findings += _attr_findings(group, attrs, hdf5.groups[group], types_d.get(group, {}),
                                       types_h.get(group, {}))  # fmt: skip
    return DmrppAudit(granule, dmrpp, tuple(findings), unchecked, len(seen))


def _netcdf_name(path: str) -> str:
    parent, _, name = path.rpartition("/")
    name = name.removeprefix(_NON_COORD)
    return f"{parent}/{name}" if parent else name


def _hdf5_path(path: str, hdf5: GranuleRefs) -> str:
    """The granule's name of a DMR++ variable (netCDF-4 hides a variable named like a dimension
    of another length as ``_nc4_non_coord_<name>``; the document gives the netCDF name)."""
    parent, _, name = path.rpartition("/")
    hidden = f"{parent}/{_NON_COORD}{name}".lstrip("/")
    return hidden if path not in hdf5.arrays and hidden in hdf5.arrays else path


def _both(hdf5: Any, doc: Any) -> str:
    return f"granule: {hdf5}; DMR++: {doc}"


def _filters(arr: ArrayRefs, levels: bool) -> list[dict[str, Any]]:
    out = []
    for f in arr.meta.filters:
        f = dict(f)
        if f.get("id") == "zlib" and not levels:  # the document may omit levels: they do not
            f.pop("level", None)  # change decoding
        if f.get("id") == "shuffle" and int(f.get("elementsize", 0)) <= 1:
            continue  # shuffling one-byte elements is a no-op either side may drop
        out.append(f)
    return out


def _array_findings(path: str, doc: ArrayRefs, hdf5: ArrayRefs) -> list[DmrppFinding]:
    a, b = doc.meta, hdf5.meta
    out = []
    if a.shape != b.shape:
        return [DmrppFinding(path, "shape", _both(list(b.shape), list(a.shape)))]
    if _text_held_as_text(doc, hdf5):
        return []  # dmrpp:compact text is read as text: its width is not the document's to say
    if a.dtype != b.dtype and not _compact_little_endian(doc, hdf5):
        out.append(DmrppFinding(path, "dtype", _both(b.dtype, a.dtype)))
    levels = any("level" in f for f in a.filters if f.get("id") == "zlib")
    if _filters(doc, levels) != _filters(hdf5, levels):
        out.append(DmrppFinding(path, "filters", _both(_filters(hdf5, levels),
                                                       _filters(doc, levels))))  # fmt: skip
    # a fill value is read only where a chunk is missing (elsewhere neither reader uses it)
    missing = _fills_chunks(doc) or _fills_chunks(hdf5)
    if missing and _fill(a.fill_value) != _fill(b.fill_value):
        out.append(DmrppFinding(path, "fill value", _both(b.fill_value, a.fill_value)))
    if doc.status == "inlined" or hdf5.status == "inlined":
        return out  # values held in the sidecar on one side: no byte ranges to compare
    if a.chunks != b.chunks:
        out.append(DmrppFinding(path, "chunk shape", _both(list(b.chunks), list(a.chunks))))
        return out
    detail = _chunk_differences(doc, hdf5)
    if detail:
        out.append(DmrppFinding(path, "chunks", detail))
    return out


def _fills_chunks(arr: ArrayRefs) -> bool:
    """Chunks of ``arr`` are the fill value: missing, or stored in the sidecar full of it (the
    only chunks both indexers hold inline in an array whose others are byte ranges)."""
    manifest = arr.manifest
    return bool(manifest.n_missing or (arr.status == "virtual" and manifest.n_inline))


def _text_held_as_text(doc: ArrayRefs, hdf5: ArrayRefs) -> bool:
    """A fixed-length string the document holds as text (``dmrpp:compact``)."""
    return (doc.status == "inlined" and doc.meta.dtype == "|O"
            and str(hdf5.meta.dtype).startswith("|S"))  # fmt: skip


def _compact_little_endian(doc: ArrayRefs, hdf5: ArrayRefs) -> bool:
    """Values the document holds (``dmrpp:compact``, always little-endian) of the granule's type
    in another byte order: the same values, not a disagreement."""
    a, b = doc.meta.dtype, hdf5.meta.dtype
    if doc.status != "inlined" or not isinstance(a, str) or not isinstance(b, str):
        return False
    return np.dtype(a) == np.dtype(b).newbyteorder("<")


def _fill(value: Any) -> Any:
    """A fill value comparable across indexers (NaN equal to NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def _chunk_differences(doc: ArrayRefs, hdf5: ArrayRefs) -> str:
    """Chunks at another offset or length, or present on one side only ("" when none)."""
    md, mh = doc.manifest, hdf5.manifest
    on_d, on_h = md.codes >= 0, mh.codes >= 0
    # the same stored chunk in another file (a per-chunk href) is not compared by URL: the
    # DMR++ indexer resolved it beside the granule, where the HDF5 indexer found it
    both = on_d & on_h
    moved = both & ((md.offsets != mh.offsets) | (md.lengths != mh.lengths))
    parts = []
    if moved.any():
        first = tuple(int(i) for i in np.argwhere(moved)[0])
        parts.append(
            f"{int(moved.sum())} chunk(s) at another offset or length (first {list(first)}: "
            + _both(f"{int(mh.offsets[first])}+{int(mh.lengths[first])}",
                    f"{int(md.offsets[first])}+{int(md.lengths[first])}") + ")"
        )  # fmt: skip
    for only, side in ((on_h & ~on_d, "the granule"), (on_d & ~on_h, "the DMR++")):
        if only.any():
            at = [int(i) for i in np.argwhere(only)[0]]
            parts.append(f"{int(only.sum())} chunk(s) stored in {side} only (first {at})")
    return "; ".join(parts)


def _attr_findings(
    path: str,
    doc: Mapping[str, Any],
    hdf5: Mapping[str, Any],
    types_d: Mapping[str, str],
    types_h: Mapping[str, str],
) -> list[DmrppFinding]:
    out = []
    for name in sorted(set(doc) | set(hdf5)):
        where = f"{path}@{name}"
        if name not in doc:
            out.append(DmrppFinding(where, "attribute", _both(_short(hdf5[name]), "absent")))
        elif name not in hdf5:
            out.append(DmrppFinding(where, "attribute", _both("absent", _short(doc[name]))))
        elif not _same_value(doc[name], hdf5[name]):
            out.append(DmrppFinding(where, "attribute",
                                    _both(_short(hdf5[name]), _short(doc[name]))))  # fmt: skip
        elif types_d.get(name) != types_h.get(name):
            out.append(DmrppFinding(where, "attribute",
                                    "type " + _both(types_h.get(name), types_d.get(name))))  # fmt: skip
    return out


def _same_value(a: Any, b: Any) -> bool:
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))
    except TypeError:  # text: NaN has no meaning
        return bool(a == b)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
