"""A DAP4 ``Structure`` (an HDF5 compound type) -> the structured dtype the HDF5 indexer writes.

The document lists the members in order with their DAP4 types and array shapes; where each
member starts is in ``dmrpp:chunks structOffset`` (the offsets of the second to last members,
then the size of one element).  Without it the members are taken as packed one after the
other, which :func:`~._dmrpp_variable.convert_variable` then checks against the bytes of the
chunks (unfiltered chunks by their sizes, filtered ones by decoding one).  The layout becomes
the same flattened Zarr v2 dtype as the HDF5 indexer's (:func:`structured_json`: gaps as
``_pad<offset>`` fields, array members as ``name[i]``).  Members whose layout the document does
not give -- strings, nested structures -- make the variable skipped.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import fail
from h5sidecar.indexer.dmrpp._dap_types import ATOMIC, numpy_dtype
from h5sidecar.indexer.dmrpp._dmrpp_document import DmrVariable
from h5sidecar.indexer.dtypes._compound import structured_json

__all__ = ["needs_byte_order", "structure_dtype"]


def needs_byte_order(var: DmrVariable) -> bool:
    """Whether a member is a number of more than one byte."""
    return any(ATOMIC.get(m.dap_type, np.dtype("u1")).itemsize > 1 for m in var.members)


def structure_dtype(var: DmrVariable, order: str) -> tuple[np.dtype, list[Any], str, bool]:
    """``(flat numpy dtype, Zarr v2 list form, note, packed)`` of a ``Structure``.

    ``packed`` is True when the document gives no ``structOffset`` (members assumed
    adjacent: the caller must check that against the chunks).

    Raises
    ------
    Skip
        A member the document gives no layout for, or offsets that contradict the members.
    """
    if var.dap_type != "Structure" or not var.members:
        fail(ErrorKind.UNSUPPORTED_DTYPE, f"DAP4 {var.dap_type} without members to convert")
    formats: list[Any] = []
    sizes: list[int] = []
    for m in var.members:
        dt = numpy_dtype(m.dap_type, order)
        if dt is None or dt.kind == "S":
            fail(ErrorKind.UNSUPPORTED_DTYPE,
                 f"member {m.name!r} of DAP4 type {m.dap_type}: the document gives no byte "
                 "layout for string or nested members; index the HDF5 file instead")  # fmt: skip
        formats.append((dt, m.shape) if m.shape else dt)
        sizes.append(dt.itemsize * math.prod(m.shape))
    given = var.chunks.struct_offsets if var.chunks is not None else ()
    if given:
        if len(given) != len(var.members):
            fail(ErrorKind.OTHER,
                 f"structOffset gives {len(given)} numbers for {len(var.members)} members")  # fmt: skip
        offsets, itemsize = [0, *given[:-1]], given[-1]
    else:
        offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        itemsize = sum(sizes)
    ends = [o + n for o, n in zip(offsets, sizes, strict=True)]
    if any(e > o for e, o in zip(ends, [*offsets[1:], itemsize], strict=True)):
        fail(ErrorKind.OTHER, f"structOffset {list(given)} overlaps the members' sizes {sizes}")
    dt = np.dtype(
        {"names": [m.name for m in var.members], "formats": formats, "offsets": offsets,
         "itemsize": itemsize}
    )  # fmt: skip
    fields, note = structured_json(dt)
    flat = np.dtype([(str(n), t) for n, t in fields])
    return flat, fields, note, not given
