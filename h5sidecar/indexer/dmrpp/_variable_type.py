"""What a DMR++ variable's values are stored as: NumPy and Zarr dtypes, from its DAP4 type, the
document's byte order, enumerations, strings and structures.

Nothing is guessed: a multi-byte type without a byte order is skipped unless the caller says
which to assume; a ``String`` is fixed-length only when the document or its unfiltered chunks'
sizes prove it; a ``Structure`` needs member offsets, or chunks to check packed members against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import fail
from h5sidecar.indexer.dmrpp._dap_types import numpy_dtype
from h5sidecar.indexer.dmrpp._dmrpp_document import DmrVariable
from h5sidecar.indexer.dmrpp._filter_order import ReadRanges
from h5sidecar.indexer.dmrpp._structure import needs_byte_order, structure_dtype
from h5sidecar.settings import IndexSettings

__all__ = ["Conversion", "Enumerations", "VariableType", "variable_type"]

#: Enumeration path -> (DAP4 base type, {name: value}).
Enumerations = Mapping[str, tuple[str, Mapping[str, int]]]


@dataclass(frozen=True, slots=True)
class Conversion:
    """What every variable of one document is converted with.

    Attributes
    ----------
    enums : Enumerations
        The document's enumerations.
    byte_order : "LE", "BE" or None
        The byte order to assume where the document gives none (``None``: such multi-byte
        variables are skipped).
    read : callable or None
        Reads byte ranges of the data files, to check what the document cannot be trusted
        with (the order of a fletcher32 filter among others); ``None`` reads nothing.
    materialize_limit : int
        Most bytes of never-written chunks to store in the sidecar per variable
        (:attr:`~h5sidecar.settings.IndexSettings.materialize_limit`).
    """

    enums: Enumerations
    byte_order: str | None = None
    read: ReadRanges | None = None
    materialize_limit: int = field(default_factory=lambda: IndexSettings().materialize_limit)


def _byte_order(var: DmrVariable, ctx: Conversion) -> str:
    """The document's byte order, else the one assumed, else ``Skip`` (never guessed: old
    documents leave ``byteOrder`` out, and big-endian data exist).

    ``dmrpp:compact`` values are little-endian whatever the document says: build_dmrpp writes
    them in its host's order and Hyrax takes them without a swap, ``byteOrder`` or not
    (OPeNDAP BES ``DMZ.cc`` ``DMZ::process_compact``; see ``_compact_bytes`` in
    ``h5sidecar.references.dmrpp_sidecar``), and both run on little-endian hosts."""
    if var.compact is not None:
        return "LE"
    order = var.chunks.byte_order if var.chunks is not None else None
    if order is None and ctx.byte_order is None:
        fail(ErrorKind.OTHER,
             "the document does not give the byte order of this multi-byte type (no byteOrder "
             "in dmrpp:chunks); index the HDF5 file, or pass byte_order='LE' to assume one")  # fmt: skip
    return order or str(ctx.byte_order)


@dataclass(frozen=True, slots=True)
class VariableType:
    """The stored values' type: NumPy dtype, Zarr v2 dtype, note, and whether its size is an
    assumption the chunks must confirm (a Structure without ``structOffset``)."""

    dt: np.dtype
    zarr: str | list[Any]
    note: str = ""
    check_size: bool = False


#: Bytes per element of HDF5 variable-length data in a dataset (a global heap ID, with 8- or
#: 4-byte file offsets): a String of this size per element may be either kind.
_HEAP_ID_SIZES = (16, 12)


def _fixed_string(var: DmrVariable) -> int | None:
    """The length of a String worked out from its unfiltered chunks' sizes (``None``: unsure)."""
    chunks = var.chunks
    if chunks is None or chunks.filters or not chunks.n_chunks:
        return None
    n = int(np.prod(chunks.chunk_shape or var.shape or (), dtype=np.int64)) or 1
    sizes = set((chunks.lengths // n).tolist())
    if len(sizes) != 1 or bool((chunks.lengths % n).any()):
        return None
    (size,) = sizes
    return None if size in _HEAP_ID_SIZES or size <= 0 else int(size)


def _string_type(var: DmrVariable) -> VariableType:
    if var.string_length is not None:
        return VariableType(np.dtype(f"|S{var.string_length}"), f"|S{var.string_length}")
    if var.compact is not None and not var.shape:
        return VariableType(np.dtype("|O"), "|O", "a compact string held in the sidecar as text")
    length = _fixed_string(var)
    if length is not None:
        why = (
            f"fixed-length strings of {length} bytes, from the sizes of the unfiltered chunks "
            "(variable-length strings take 16 bytes each)"
        )
        return VariableType(np.dtype(f"|S{length}"), f"|S{length}", why)
    fail(
        ErrorKind.UNSUPPORTED_DTYPE,
        "DMR++ String without dmrpp:FixedLengthStringArray: the document does not say "
        "whether the strings are of fixed length (and which) or variable-length (HDF5 "
        "global heap references, which DMR++ does not index); index the HDF5 file instead",
    )


def variable_type(var: DmrVariable, ctx: Conversion) -> VariableType:
    """The type of the stored values, or ``Skip``."""
    if var.dap_type == "Enum":
        base, consts = ctx.enums.get(var.enum or "", ("", {}))
        dt = numpy_dtype(base, "LE")
        if dt is not None and dt.itemsize > 1:
            dt = numpy_dtype(base, _byte_order(var, ctx))
        if dt is None:
            fail(ErrorKind.UNSUPPORTED_DTYPE,
                 f"enumeration {var.enum!r} is not declared in the document or has no integer base")  # fmt: skip
        if dt.itemsize == 1 and dict(consts) == {"FALSE": 0, "TRUE": 1}:
            return VariableType(
                np.dtype("|b1"), "|b1"
            )  # h5py's boolean enumeration, as netCDF shows
        return VariableType(dt, dt.str)
    if var.dap_type in ("String", "URL"):
        return _string_type(var)
    if var.dap_type in ("Structure", "Sequence"):
        order = _byte_order(var, ctx) if needs_byte_order(var) else "LE"
        flat, fields, note, packed = structure_dtype(var, order)
        return VariableType(flat, fields, note, check_size=packed)
    dt = numpy_dtype(var.dap_type, "LE")
    if dt is None:
        fail(ErrorKind.UNSUPPORTED_DTYPE, f"DAP4 type {var.dap_type} has no Zarr dtype")
    if dt.itemsize > 1:
        dt = dt.newbyteorder(">" if _byte_order(var, ctx).upper() == "BE" else "<")
    return VariableType(dt, dt.str)
