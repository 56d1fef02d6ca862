"""Hints found in a dataset's values: the global heap collections of variable-length data.

A variable-length dataset (h5py's default for ``str``) stores, per element, a length and a
global heap ID; the strings themselves are in global heap collections that HDF5 reads when
the values are read (the indexer reads such datasets to inline them).  Their addresses are in
the dataset's raw data, not in any metadata structure, so without these hints every such
dataset cost a round trip for its raw data and another for its collection, one dataset after
another.  Only contiguous and compact data of a plain variable-length type is followed (a
chunked one would have to be decompressed).  See :mod:`._hints`.
"""

from __future__ import annotations

from collections.abc import Mapping

from h5sidecar.indexer.crawl._hint_records import (
    BadStructure,
    Hint,
    Layout,
    View,
    address_hint,
    u,
)

__all__ = ["MAX_VLEN_BYTES", "vlen_attributes", "vlen_heap_ids", "vlen_values"]

#: Raw data of at most this many bytes is parsed for heap IDs (4,096 elements): the values the
#: indexer inlines; larger ones are left to HDF5's own reads rather than parsed in Python.
MAX_VLEN_BYTES = 64 << 10

_DATATYPE, _LAYOUT = 0x03, 0x08


def vlen_values(bodies: Mapping[int, bytes], layout: Layout) -> list[Hint]:
    """Hints for the values of an object header's dataset when its type is variable-length:
    the raw data (contiguous), or the collections its compact data points at.

    ``bodies`` maps a message type to the body of the header's first message of that type.
    """
    dtype, data_layout = bodies.get(_DATATYPE), bodies.get(_LAYOUT)
    if not dtype or not data_layout or dtype[0] & 0x0F != 9 or data_layout[0] < 3:
        return []  # not variable-length, or a layout message older than version 3
    try:
        if data_layout[1] == 1:  # contiguous: address, size
            o = layout.offset_size
            size = u(data_layout, 2 + o, layout.length_size)
            if not 0 < size <= MAX_VLEN_BYTES:
                return []
            return address_hint(layout, "vlen", u(data_layout, 2, o), size)
        if data_layout[1] == 0:  # compact: size, then the data itself
            size = u(data_layout, 2, 2)
            return vlen_heap_ids(data_layout[4 : 4 + size], layout)
    except BadStructure:
        pass  # a truncated message: HDF5 reads what it needs on demand
    return []


def vlen_heap_ids(data: bytes, layout: Layout) -> list[Hint]:
    """The collections variable-length elements point at (length, collection address, index
    each; a null address is an empty element)."""
    o = layout.offset_size
    step = 8 + o
    found: dict[int, None] = {}
    for pos in range(0, len(data) - step + 1, step):
        addr = u(data, pos + 4, o)
        if addr:
            found[addr] = None
    return [hint for addr in found for hint in address_hint(layout, "gcol", addr)]


def vlen_attributes(data: bytes, pos: int, layout: Layout) -> list[Hint]:
    """The collections of the variable-length values of the attribute messages packed one
    after another from ``pos`` (a dense attribute heap's direct block); stops at the first
    bytes that are not an attribute message (the block's free space)."""
    hints: list[Hint] = []
    while pos < len(data):
        try:
            end, values = _attribute(data, pos, layout)
        except (BadStructure, IndexError):
            break
        if values is not None:
            hints += vlen_heap_ids(data[values:end], layout)
        pos = end
    return hints


def _attribute(data: bytes, pos: int, layout: Layout) -> tuple[int, int | None]:
    """(end, start of the values when they are variable-length) of the attribute message
    (version 1-3) at ``pos``; :class:`BadStructure` when the bytes are not one."""
    version, flags = data[pos], data[pos + 1]
    if version not in (1, 2, 3) or (version > 1 and flags & 0x03):  # shared type or space
        raise BadStructure(f"no attribute message at {pos}")
    sizes = [u(data, pos + 2, 2), u(data, pos + 4, 2), u(data, pos + 6, 2)]
    if version == 1:
        sizes = [(n + 7) & ~7 for n in sizes]
    dtype = pos + 8 + (version == 3) + sizes[0]
    space = dtype + sizes[1]
    values = space + sizes[2]
    end = values + _elements(data, space, layout) * u(data, dtype + 4, 4)
    if end > len(data):
        raise BadStructure(f"attribute message at {pos} runs past its block")
    return end, values if data[dtype] & 0x0F == 9 else None


def _elements(data: bytes, pos: int, layout: Layout) -> int:
    """Elements of the dataspace message at ``pos`` (versions 1 and 2)."""
    version, rank, ln = data[pos], data[pos + 1], layout.length_size
    if version == 2 and data[pos + 3] != 1:
        return 1 if data[pos + 3] == 0 else 0  # scalar, null
    if version not in (1, 2):
        raise BadStructure(f"dataspace message version {version}")
    first = pos + (8 if version == 1 else 4)
    count = 1
    for i in range(rank):
        count *= u(data, first + i * ln, ln)
    return count


def vlen(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """A variable-length dataset's contiguous raw data -> the collections it points at."""
    return vlen_heap_ids(view(hint.addr, hint.addr + hint.size), layout)


PARSERS = {"vlen": vlen}
