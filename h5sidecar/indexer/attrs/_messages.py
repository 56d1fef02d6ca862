"""The attribute messages of an object, found in the bytes of its object header.

Reading attributes through h5py costs ~35 us each (an ``H5Aopen``, a Python object, a read and a
type query), which made attributes ~40% of indexing a granule of ~1,000 variables with ~11
attributes each.  The attribute messages are a few hundred bytes of the object header HDF5 has
just read (or of its dense storage: a fractal heap indexed by a version-2 B-tree), so this module
finds them in those bytes (the header walk is :mod:`h5sidecar.indexer.attrs._object_header`'s),
in the order h5py iterates them, and :mod:`h5sidecar.indexer.attrs._message_decode` decodes
their values.

Only what is fully understood is served: any other structure (shared messages, huge or filtered
heap objects, nested indirect blocks, a checksum mismatch, anything odd) raises
:class:`NotNative` and the object's attributes are read through h5py, never guessed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from numcodecs.checksum32 import jenkins_lookup3

from h5sidecar.indexer.attrs._object_header import (
    CONTINUATION,
    CREATION_TYPES,
    MAX_CHUNKS,
    NotNative,
    View,
    checked,
    chunk_messages,
    continuation_chunk,
    first_chunk,
)
from h5sidecar.indexer.crawl._dense_hints import _btree2_widths
from h5sidecar.indexer.crawl._hint_records import BadStructure, Layout, u

__all__ = ["RawAttribute", "attribute_messages"]

#: Object header message types read here.
_ATTRIBUTE, _ATTRIBUTE_INFO = 0x0C, 0x15
#: Version-2 B-tree type of the name index of dense attributes; its records' size.
_ATTR_NAME_INDEX, _ATTR_RECORD = 8, 17
#: A name index record: heap ID (read as one little-endian integer), message flags, creation
#: order, name hash.
_RECORD = struct.Struct("<QBI4x")


@dataclass(frozen=True, slots=True)
class RawAttribute:
    """One attribute message: its body and its creation order (0 when not tracked)."""

    body: bytes
    order: int


def attribute_messages(addr: int, view: View, layout: Layout,
                       creation: list[tuple[int, int, bytes]] | None = None,
                       ) -> tuple[list[RawAttribute], bool]:  # fmt: skip
    """The attribute messages of the object whose header is at file address ``addr``.

    Parameters
    ----------
    addr : int
        The object header's address (relative to the superblock, as HDF5 reports it).
    view : callable
        ``view(start, stop) -> bytes`` of the file, absolute offsets.
    layout : Layout
        The superblock's address arithmetic.
    creation : list, optional
        Filled with the ``(type, flags, body)`` of the header's :data:`CREATION_TYPES`
        messages once the whole header has been walked (the same walk, and checksums, serve
        a dataset's creation properties).

    Returns
    -------
    messages : list of RawAttribute
        In storage order (the caller sorts them as h5py iterates).
    tracked : bool
        Whether the header tracks attributes' creation order (h5py then iterates in that order).

    Raises
    ------
    NotNative
        Anything not understood: read the object's attributes through h5py.
    """
    try:
        return _messages(layout.base + addr, view, layout, creation)
    except (BadStructure, IndexError, ValueError) as exc:
        raise NotNative(str(exc)) from exc


def _messages(start: int, view: View, layout: Layout,
              creation: list[tuple[int, int, bytes]] | None) -> tuple[list[RawAttribute], bool]:  # fmt: skip
    head, first, flags, tracked = first_chunk(start, view, layout)
    chunks = [first]
    found: list[RawAttribute] = []
    others: list[tuple[int, int, bytes]] = []
    info: bytes | None = None
    wanted = _WANTED if creation is None else _WANTED_WITH_CREATION
    i = 0
    while i < len(chunks):  # continuation chunks are appended as they are found
        if len(chunks) > MAX_CHUNKS:
            raise NotNative("too many continuation chunks")
        for mtype, mflags, order, body in chunk_messages(chunks[i], head[0] == 1, flags, wanted):
            if mtype in (_ATTRIBUTE, _ATTRIBUTE_INFO) and mflags & 0x02:
                raise NotNative("shared attribute message")
            if mtype == _ATTRIBUTE:
                found.append(RawAttribute(body, order))
            elif mtype == _ATTRIBUTE_INFO:
                info = body
            elif mtype == CONTINUATION:
                chunks.append(continuation_chunk(body, head[0] == 1, view, layout))
            else:
                others.append((mtype, mflags, body))
        i += 1
    if creation is not None:  # the header is whole: its creation messages are all there
        creation.extend(others)
    if info is not None:
        dense = _dense(info, view, layout)
        if dense is not None:
            if found:
                raise NotNative("attributes both in the header and in dense storage")
            return dense, tracked
    return found, tracked


#: The attribute reader's message types; a dataset's creation messages are collected on the
#: same walk when asked for.
_WANTED = frozenset({_ATTRIBUTE, _ATTRIBUTE_INFO, CONTINUATION})
_WANTED_WITH_CREATION = _WANTED | CREATION_TYPES


# -- dense storage: a fractal heap indexed by name in a version-2 B-tree -----------------------
def _dense(info: bytes, view: View, layout: Layout) -> list[RawAttribute] | None:
    """The messages of dense storage (``None`` when the attribute info message says there is
    none: compact storage, the messages are in the header)."""
    o = layout.offset_size
    if info[0] != 0:
        raise NotNative(f"attribute info message version {info[0]}")
    pos = 2 + (2 if info[1] & 0x01 else 0)
    heap_addr, index_addr = u(info, pos, o), u(info, pos + o, o)
    if heap_addr == layout.undefined:
        return None
    heap = _Heap(layout.base + heap_addr, view, layout)
    return [
        RawAttribute(heap.object(heap_id), order)
        for heap_id, order in _name_index(layout.base + index_addr, view, layout)
    ]


def _name_index(start: int, view: View, layout: Layout) -> list[tuple[int, int]]:
    """(heap ID, creation order) of every record of the attribute name index."""
    o = layout.offset_size
    data = checked(view(start, start + 22 + o + layout.length_size), "B-tree header")
    if data[:4] != b"BTHD" or data[5] != _ATTR_NAME_INDEX:
        raise NotNative(f"no attribute name index at {start}")
    node_size, record_size, depth = u(data, 6, 4), u(data, 10, 2), u(data, 12, 2)
    if record_size != _ATTR_RECORD:
        raise NotNative(f"attribute name index records of {record_size} bytes")
    records: list[tuple[int, int]] = []
    _node(u(data, 16, o), u(data, 16 + o, 2), depth, (node_size, view, layout), records)
    return records


def _node(
    addr: int,
    nrec: int,
    depth: int,
    tree: tuple[int, View, Layout],
    out: list[tuple[int, int]],
) -> None:
    node_size, view, layout = tree
    if len(out) > 1 << 20:
        raise NotNative("implausibly many attributes")
    start = layout.base + addr
    data = view(start, start + node_size)
    if data[:4] != (b"BTLF" if depth == 0 else b"BTIN") or data[5] != _ATTR_NAME_INDEX:
        raise NotNative(f"no B-tree node at {start}")
    end = 6 + nrec * _ATTR_RECORD
    if len(data) < end:
        raise NotNative(f"B-tree node at {start} shorter than its records")
    for heap_id, mflags, order in _RECORD.iter_unpack(data[6:end]):
        if mflags & 0x02:  # the message is shared: its heap object is a pointer
            raise NotNative("shared attribute message in dense storage")
        out.append((heap_id, order))
    if depth == 0:
        checked(data[: end + 4], "B-tree leaf")
        return
    o = layout.offset_size
    nrec_width, widths = _btree2_widths(node_size, _ATTR_RECORD, depth, o)
    pointer = o + nrec_width + (widths[depth - 1] if depth > 1 else 0)
    checked(data[: end + (nrec + 1) * pointer + 4], "B-tree internal node")
    for pos in range(end, end + (nrec + 1) * pointer, pointer):
        _node(u(data, pos, o), u(data, pos + o, nrec_width), depth - 1, tree, out)


#: A fractal heap header's doubling table fields by (offset size, length size): table width,
#: starting block size, maximum direct block size, maximum heap size (bits), starting rows
#: (skipped), root block address, rows in the root indirect block.
_DOUBLING_TABLE = {
    (o, ln): struct.Struct(f"<H{lf}{lf}H2x{of}H")
    for o, of in ((4, "I"), (8, "Q"))
    for ln, lf in ((4, "I"), (8, "Q"))
}


class _Heap:
    """A fractal heap's managed objects: in its root direct block, or in the direct blocks of
    its root indirect block (a nested indirect block is not read here)."""

    def __init__(self, start: int, view: View, layout: Layout) -> None:
        o, ln = layout.offset_size, layout.length_size
        table = 14 + 10 * ln + 2 * o
        data = view(start, start + table + 12 + 2 * ln + o)
        if data[:4] != b"FRHP" or data[4] != 0:
            raise NotNative(f"no fractal heap at {start}")
        if u(data, 7, 2):
            raise NotNative("filtered fractal heap")
        checked(data, "fractal heap header")
        self.view, self.layout = view, layout
        self.checksummed = bool(data[9] & 0x02)
        doubling = _DOUBLING_TABLE.get((o, ln))
        if doubling is not None and len(data) >= table + doubling.size:  # one struct per heap
            (self.width, self.start_size, max_direct, heap_bits, self.root,
             self.rows) = doubling.unpack_from(data, table)  # fmt: skip
        else:
            self.width, self.start_size = u(data, table, 2), u(data, table + 2, ln)
            max_direct, heap_bits = u(data, table + 2 + ln, ln), u(data, table + 2 + 2 * ln, 2)
            self.root = u(data, table + 6 + 2 * ln, o)
            self.rows = u(data, table + 6 + 2 * ln + o, 2)
        self.offset_bytes = (heap_bits + 7) // 8
        # a heap ID is read as one integer: a byte of version and type, then the offset and
        # the length fields
        self._offset_mask = (1 << 8 * self.offset_bytes) - 1
        # as H5HF__hdr_finish_init_phase1 sizes a heap ID's length field
        max_managed = u(data, 10, 4)
        self.length_bytes = min((max_direct.bit_length() - 1 + 7) // 8,
                                (max(max_managed, 1).bit_length() - 1) // 8 + 1)  # fmt: skip
        self.direct_rows = max_direct.bit_length() - self.start_size.bit_length() + 2
        self._length_shift = 8 + 8 * self.offset_bytes
        self._length_mask = (1 << 8 * self.length_bytes) - 1
        if self.start_size <= 0 or self.width <= 0 or self.rows > self.direct_rows:
            raise NotNative("fractal heap with nested indirect blocks")
        self._blocks: list[int] | None = None
        self._verified: dict[int, bytes] = {}  # direct blocks read (a few per object)

    def object(self, heap_id: int) -> bytes:
        """The bytes of the managed object ``heap_id`` (8 bytes, little-endian) points at."""
        if heap_id & 0xF0:  # version 0, managed (huge and tiny objects are not read here)
            raise NotNative("huge or tiny heap object")
        offset = (heap_id >> 8) & self._offset_mask
        length = (heap_id >> self._length_shift) & self._length_mask
        if self.rows == 0:  # the root is a direct block (the usual case: a few attributes)
            block, block_offset, size = self.root, 0, self.start_size
        else:
            block, block_offset, size = self._block_of(offset)
        at = offset - block_offset
        if at + length > size:
            raise NotNative("heap object past the end of its block")
        data = self._verified.get(block)
        if data is None:
            data = self._direct(block, block_offset, size)
        return data[at : at + length]

    def _block_of(self, offset: int) -> tuple[int, int, int]:
        """(file address, heap offset, size) of the direct block holding heap offset ``offset``."""
        if self.rows == 0:
            return self.root, 0, self.start_size
        blocks = self._indirect()
        row_start = 0
        for row in range(self.rows):
            size = self.start_size << max(row - 1, 0)
            if offset < row_start + self.width * size:
                col = (offset - row_start) // size
                return blocks[row * self.width + col], row_start + col * size, size
            row_start += self.width * size
        raise NotNative(f"heap offset {offset} outside the heap")

    def _indirect(self) -> list[int]:
        if self._blocks is None:
            o, start = self.layout.offset_size, self.layout.base + self.root
            head = 5 + o + self.offset_bytes
            data = self.view(start, start + head + self.rows * self.width * o + 4)
            if data[:4] != b"FHIB":
                raise NotNative(f"no indirect block at {start}")
            checked(data, "fractal heap indirect block")
            count = self.rows * self.width
            self._blocks = [u(data, head + i * o, o) for i in range(count)]
        return self._blocks

    def _direct(self, addr: int, block_offset: int, size: int) -> bytes:
        if addr in self._verified:
            return self._verified[addr]
        if addr == self.layout.undefined:
            raise NotNative("heap object in an unallocated block")
        start = self.layout.base + addr
        data = self.view(start, start + size)
        head = 5 + self.layout.offset_size
        if data[:4] != b"FHDB" or u(data, head, self.offset_bytes) != block_offset:
            raise NotNative(f"no direct block at {start}")
        if self.checksummed:
            at = head + self.offset_bytes
            stored = u(data, at, 4)
            if jenkins_lookup3(data[:at] + bytes(4) + data[at + 4 :], 0) != stored:
                raise NotNative("fractal heap direct block: checksum mismatch")
        self._verified[addr] = data
        return data
