"""Hints from the newer HDF5 indexes and dense storage (superblock 2/3 files, netCDF-4 groups).

Chunk indexes of ``libver="latest"`` files (fixed arrays, extensible arrays, version-2 B-trees)
and the dense storage of groups and attributes with many members (a fractal heap indexed by a
version-2 B-tree).  One or two levels are parsed: enough to reach the blocks HDF5 reads next,
and, for dense groups, the object headers their links point at.  See :mod:`._hints`; the shared primitives are in :mod:`._hint_records`.
"""

from __future__ import annotations

from h5sidecar.indexer.crawl._hint_records import (
    BadStructure,
    Hint,
    Layout,
    Parser,
    View,
    address_hint,
    link_target,
    u,
)
from h5sidecar.indexer.crawl._vlen_hints import vlen_attributes

__all__ = ["PARSERS"]

#: Deeper version-2 B-trees are taken for corrupt headers (HDF5's reach a depth of a few).
MAX_BTREE_DEPTH = 32


def _fahd(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Fixed-array header -> its data block (element size x count bytes, plus a header)."""
    ln = layout.length_size
    data = view(hint.addr, min(hint.addr + 8 + ln + layout.offset_size, layout.size))
    if data[:4] != b"FAHD":
        raise BadStructure(f"no FAHD at {hint.addr}")
    nbytes = 64 + data[6] * u(data, 8, ln)
    return address_hint(layout, "blob", u(data, 8 + ln, layout.offset_size), nbytes)


def _eahd(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Extensible-array header -> its index block (with the array's creation parameters)."""
    ln = layout.length_size
    data = view(hint.addr, min(hint.addr + 12 + 6 * ln + layout.offset_size, layout.size))
    if data[:4] != b"EAHD":
        raise BadStructure(f"no EAHD at {hint.addr}")
    params = tuple(data[6:11])  # element size, max bits, index elements, min elements, min ptrs
    return address_hint(layout, "eaib", u(data, 12 + 6 * ln, layout.offset_size), 0, params)


def _eaib(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Extensible-array index block: elements kept inline, then the addresses of the first data
    blocks (super block ``s`` has ``2**(s//2)`` data blocks of ``2**((s+1)//2) * min`` elements,
    as ``H5EA__hdr_init`` lays them out) and of the secondary blocks."""
    esize, max_bits, index_elmts, min_elmts, min_ptrs = hint.extra
    o = layout.offset_size
    n_dblk = 2 * (min_ptrs - 1)
    n_sblk = 1 + max_bits - (min_elmts.bit_length() - 1) - 2 * (min_ptrs.bit_length() - 1)
    start = 6 + o + index_elmts * esize
    data = view(hint.addr, min(hint.addr + start + (n_dblk + max(n_sblk, 0)) * o, layout.size))
    if data[:4] != b"EAIB":
        raise BadStructure(f"no EAIB at {hint.addr}")
    hints: list[Hint] = []
    sizes = _eaib_block_sizes(min_elmts, n_dblk)
    for i in range(n_dblk):
        nbytes = 6 + o + (max_bits + 7) // 8 + sizes[i] * esize + 4
        hints += address_hint(layout, "blob", u(data, start + i * o, o), nbytes)
    for i in range(max(n_sblk, 0)):
        hints += address_hint(layout, "blob", u(data, start + (n_dblk + i) * o, o))
    return hints


def _eaib_block_sizes(min_elmts: int, n: int) -> list[int]:
    """Elements of the first ``n`` data blocks (super block ``s`` holds ``2**(s//2)`` blocks):
    stops at ``n``, since a corrupt header makes the super block count anything."""
    sizes: list[int] = []
    s = 0
    while len(sizes) < n:
        sizes += [min_elmts << ((s + 1) // 2)] * min(1 << (s // 2), n - len(sizes))
        s += 1
    return sizes


# -- version-2 B-trees ---------------------------------------------------------------------------
def _bthd(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Version-2 B-tree header -> its root node (a leaf, or an internal node per its depth)."""
    o = layout.offset_size
    data = view(hint.addr, min(hint.addr + 18 + o, layout.size))
    if data[:4] != b"BTHD":
        raise BadStructure(f"no BTHD at {hint.addr}")
    node_size, record_size, depth = u(data, 6, 4), u(data, 10, 2), u(data, 12, 2)
    root, nrec = u(data, 16, o), u(data, 16 + o, 2)
    if depth == 0:
        return address_hint(layout, "blob", root, node_size)
    return address_hint(layout, "btin", root, node_size, (node_size, record_size, depth, nrec))


def _btin(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Version-2 B-tree internal node: ``nrec`` records, then ``nrec + 1`` child pointers whose
    field widths follow from the tree's geometry (derived as ``H5B2__hdr_init`` does)."""
    node_size, record_size, depth, nrec = hint.extra
    data = view(hint.addr, hint.addr + hint.size)
    if data[:4] != b"BTIN":
        raise BadStructure(f"no BTIN at {hint.addr}")
    o = layout.offset_size
    nrec_width, total_widths = _btree2_widths(node_size, record_size, depth, o)
    pointer = o + nrec_width + (total_widths[depth - 1] if depth > 1 else 0)
    hints: list[Hint] = []
    for pos in range(
        6 + nrec * record_size, 6 + nrec * record_size + (nrec + 1) * pointer, pointer
    ):
        child, child_nrec = u(data, pos, o), u(data, pos + o, nrec_width)
        if depth == 1:
            hints += address_hint(layout, "blob", child, node_size)
        else:
            geometry = (node_size, record_size, depth - 1, child_nrec)
            hints += address_hint(layout, "btin", child, node_size, geometry)
    return hints


def _btree2_widths(node_size: int, record_size: int, depth: int, o: int) -> tuple[int, list[int]]:
    """Bytes of a child's record count, and of the cumulative record counts at each depth."""

    def width(n: int) -> int:
        return (max(n, 1).bit_length() - 1) // 8 + 1

    if record_size <= 0 or node_size <= 10 + record_size or depth > MAX_BTREE_DEPTH:
        raise BadStructure(f"implausible B-tree geometry ({node_size}, {record_size}, {depth})")
    leaf_max = (node_size - 10) // record_size  # 10: signature, version, type, checksum
    nrec_width = width(leaf_max)
    cumulative, widths = [leaf_max], [0]
    for d in range(1, depth + 1):
        pointer = o + nrec_width + (widths[d - 1] if d > 1 else 0)
        max_nrec = (node_size - (10 + pointer)) // (record_size + pointer)
        cumulative.append((max_nrec + 1) * cumulative[d - 1] + max_nrec)
        widths.append(width(cumulative[d]))
    return nrec_width, widths


# -- fractal heaps (dense links and attributes) --------------------------------------------------
def _frhp(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Fractal heap header -> its root block: a direct block of the starting size, or an
    indirect block listing direct blocks.  ``extra`` says whether the heap holds links."""
    o, ln = layout.offset_size, layout.length_size
    table = 14 + 10 * ln + 2 * o  # the doubling table's parameters start here
    data = view(hint.addr, min(hint.addr + table + 8 + 2 * ln + o, layout.size))
    if data[:4] != b"FRHP":
        raise BadStructure(f"no FRHP at {hint.addr}")
    links = hint.extra[0] if hint.extra else 0
    filtered, checksummed = int(u(data, 7, 2) > 0), (data[9] >> 1) & 1
    width, start_size = u(data, table, 2), u(data, table + 2, ln)
    max_direct, heap_bits = u(data, table + 2 + ln, ln), u(data, table + 2 + 2 * ln, 2)
    root, rows = u(data, table + 6 + 2 * ln, o), u(data, table + 6 + 2 * ln + o, 2)
    block = (links, heap_bits, checksummed)
    if rows == 0:
        return address_hint(layout, "fhdb", root, start_size, block)
    geometry = (width, start_size, max_direct, heap_bits, rows, filtered, links, checksummed)
    return address_hint(layout, "fhib", root, 0, geometry)


def _fhib(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Fractal heap indirect block: addresses of its direct blocks, row by row (row sizes double
    from the second row on); nested indirect blocks are left to demand reads."""
    width, start_size, max_direct, heap_bits, rows, filtered, links, checksummed = hint.extra
    o, ln = layout.offset_size, layout.length_size
    direct_rows = min(rows, max_direct.bit_length() - start_size.bit_length() + 2)
    entry = o + (ln + 4 if filtered else 0)
    head = 5 + o + (heap_bits + 7) // 8
    data = view(hint.addr, min(hint.addr + head + direct_rows * width * entry, layout.size))
    if data[:4] != b"FHIB":
        raise BadStructure(f"no FHIB at {hint.addr}")
    hints: list[Hint] = []
    for row in range(direct_rows):
        size = start_size << max(row - 1, 0)
        for col in range(width):
            addr = u(data, head + (row * width + col) * entry, o)
            hints += address_hint(layout, "fhdb", addr, size, (links, heap_bits, checksummed))
    return hints


def _fhdb(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Fractal heap direct block.  A dense group's block holds its link messages packed one
    after another: their hard links point at the members' object headers; dense attributes'
    block holds attribute messages: variable-length values point at global heap collections."""
    links, heap_bits, checksummed = hint.extra
    data = view(hint.addr, hint.addr + hint.size)
    if data[:4] != b"FHDB":
        raise BadStructure(f"no FHDB at {hint.addr}")
    hints: list[Hint] = []
    pos = 5 + layout.offset_size + (heap_bits + 7) // 8 + 4 * checksummed
    if not links:
        return vlen_attributes(data, pos, layout)
    while links and pos < len(data):
        try:
            target = link_target(data, pos, layout)
        except (BadStructure, IndexError):
            break  # free space (or the end of the packed messages)
        if target is None:
            break
        addr, length = target
        if addr >= 0:
            hints += address_hint(layout, "ohdr", addr)
        pos += length
    return hints


PARSERS: dict[str, Parser] = {
    "fahd": _fahd,
    "eahd": _eahd,
    "eaib": _eaib,
    "bthd": _bthd,
    "btin": _btin,
    "frhp": _frhp,
    "fhib": _fhib,
    "fhdb": _fhdb,
}
