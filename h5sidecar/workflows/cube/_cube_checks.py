"""What makes granules safe to hold in one datacube: equal CF encodings, ordered coordinates.

A cube's variables carry one set of attributes, so every granule must encode each variable the
same way: the CF attributes xarray decodes with (``scale_factor``, ``add_offset``,
``_FillValue``, ``missing_value``, ``_Unsigned``, ``units``, ``calendar``), and how the bytes
are stored (dtype, codecs, chunk shape, storage fill value, the other dimensions' lengths).
Combining tools that keep the first file's attributes silently mis-decode the others;
:func:`encoding_groups` finds the differences so they can be refused, naming granules,
variables and values, or split into consistently-encoded cubes.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.read import MASK_AND_SCALE_ATTRS, TIME_ATTRS
from h5sidecar.references import ArrayMeta, GranuleRefs

__all__ = [
    "check_order",
    "check_shared_values",
    "encoding_diff",
    "encoding_groups",
    "encoding_key",
    "encoding_of",
    "encodings",
    "mismatch_message",
]

#: Attributes compared between granules (the CF decoding ones + units/calendar).
CF_ATTRS = tuple(dict.fromkeys((*MASK_AND_SCALE_ATTRS, "units", *TIME_ATTRS)))
#: How many granule names a message lists per value before "and N more".
_NAMES_SHOWN = 4


def _fields(meta: ArrayMeta, dim: str, ignore: Sequence[str]) -> dict[str, Any]:
    """One variable's encoding fields, raw (see :func:`encoding_of`)."""
    fields: dict[str, Any] = {a: meta.attrs.get(a) for a in CF_ATTRS}
    fields.update(
        dtype=meta.dtype,
        filters=[dict(f) for f in meta.filters],
        compressor=None if meta.compressor is None else dict(meta.compressor),
        chunks=list(meta.chunks),
        storage_fill_value=meta.fill_value,
        dimensions=list(meta.dimension_names),
        shape=[None if n == dim else s
               for n, s in zip(meta.dimension_names or ("",) * len(meta.shape), meta.shape,
                               strict=True)],
    )
    for k in ignore:
        fields.pop(k, None)
    return fields


def _canonical(value: Any) -> str:
    """The canonical JSON text every encoding comparison is made on."""
    return json.dumps(value, sort_keys=True, default=str)


def encoding_of(meta: ArrayMeta, dim: str, ignore: Sequence[str] = ()) -> dict[str, str]:
    """One variable's encoding, field -> canonical JSON text (what must agree across granules).

    ``shape`` is left out along ``dim`` (the concatenated dimension may differ in length), and
    so are the fields named in ``ignore`` (a normalized time coordinate's ``units``).
    """
    return {k: _canonical(v) for k, v in _fields(meta, dim, ignore).items()}


#: Fields to leave out of the comparison, per array path.
Ignore = Mapping[str, Sequence[str]]


def encodings(refs: GranuleRefs, paths: Sequence[str], dim: str,
              ignore: Ignore | None = None) -> dict[str, dict[str, str]]:
    """:func:`encoding_of` every array of ``paths`` (what a cube records to check appends)."""
    ignore = ignore or {}
    return {p: encoding_of(refs.arrays[p].meta, dim, ignore.get(p, ())) for p in paths}


def encoding_groups(
    parts: Sequence[GranuleRefs], paths: Sequence[str], dim: str, ignore: Ignore | None = None
) -> list[list[int]]:
    """Indices of ``parts`` grouped by identical encodings of ``paths`` (first-seen order).

    Each part's key is the canonical JSON text of all its fields at once: JSON of a mapping
    (keys sorted) is made of its values' texts, so two keys are equal exactly when every
    field's :func:`encoding_of` text is (one encoder call per part instead of one per field).
    """
    groups: dict[str, list[int]] = {}
    for i, part in enumerate(parts):
        groups.setdefault(encoding_key(part, paths, dim, ignore), []).append(i)
    return list(groups.values())


def encoding_key(part: GranuleRefs, paths: Sequence[str], dim: str,
                 ignore: Ignore | None = None) -> str:
    """One text equal between two granules exactly when their encodings of ``paths`` are
    (see :func:`encoding_groups`)."""
    ignore = ignore or {}
    return _canonical({p: _fields(part.arrays[p].meta, dim, ignore.get(p, ())) for p in paths})


def mismatch_message(
    parts: Sequence[GranuleRefs], names: Sequence[str], paths: Sequence[str], dim: str,
    ignore: Ignore | None = None,
) -> str:
    """Every variable/field whose encoding differs, with each value and the granules holding it."""
    return encoding_diff([encodings(p, paths, dim, ignore) for p in parts], names)


def encoding_diff(per_part: Sequence[Mapping[str, Mapping[str, str]]],
                  names: Sequence[str]) -> str:
    """:func:`mismatch_message` from recorded :func:`encodings` (one mapping per holder)."""
    lines = []
    for path in per_part[0]:
        per = [e.get(path, {}) for e in per_part]
        for field in sorted(set().union(*per)):
            holders: dict[str, list[str]] = {}
            for name, enc in zip(names, per, strict=True):
                holders.setdefault(enc.get(field, "(absent)"), []).append(name)
            if len(holders) < 2:
                continue
            values = "; ".join(f"{v} in {_names(ns)}" for v, ns in holders.items())
            lines.append(f"{path}.{field} differs: {values}")
    return (
        "these granules are encoded differently and cannot share one cube's attributes:\n  "
        + "\n  ".join(lines)
        + "\nPass on_mismatch='split' (--on-mismatch split) to write one cube per consistent "
        "encoding, or build the cube from granules that agree."
    )


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_NAMES_SHOWN])
    more = len(names) - _NAMES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def check_order(values: Sequence[np.ndarray], names: Sequence[str], coord: str) -> list[int]:
    """The order of granules by their coordinate values; refuse unordered or overlapping ones.

    Each granule's values must be finite and strictly increasing, and the granules' ranges must
    not overlap (a duplicate time step would be read twice).

    Raises
    ------
    IncompatibleGranulesError
        Naming the granule(s) and the values.
    """
    for name, v in zip(names, values, strict=True):
        if v.ndim != 1 or not v.size:
            raise IncompatibleGranulesError(f"{coord} in {name} is not a non-empty 1-D coordinate")
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            raise IncompatibleGranulesError(f"{coord} in {name} holds NaN or infinite values")
        if v.size > 1 and not (np.diff(v) > 0).all():
            raise IncompatibleGranulesError(
                f"{coord} in {name} is not strictly increasing; granules are ordered by it"
            )
    order = sorted(range(len(values)), key=lambda i: (values[i][0], names[i]))
    for a, b in itertools.pairwise(order):
        if values[a][-1] >= values[b][0]:
            raise IncompatibleGranulesError(
                f"{names[a]} and {names[b]} overlap along {coord} ({names[a]} ends at "
                f"{values[a][-1]!r}, {names[b]} starts at {values[b][0]!r}): duplicate or "
                "overlapping granules cannot be concatenated; leave one of them out"
            )
    return order


def check_shared_values(
    values: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], paths: Sequence[str]
) -> None:
    """Coordinates without the concat dimension (``lat``, ``lon``) must hold equal values in
    every granule: the cube keeps one copy, so a changed grid would be silently misplaced.

    Raises
    ------
    IncompatibleGranulesError
        Naming the variable and the first granule that differs from the first one.
    """
    for path in paths:
        first = values[0][path]
        for name, v in zip(names[1:], values[1:], strict=True):
            if not np.array_equal(first, v[path], equal_nan=first.dtype.kind in "fc"):
                raise IncompatibleGranulesError(
                    f"{path} holds other values in {name} than in {names[0]}: the granules are "
                    "on different grids and cannot share one cube; combine them separately"
                )
