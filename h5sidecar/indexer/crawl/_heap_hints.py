"""Hints from version-1 B-tree nodes, symbol-table nodes and heaps (local and global), and
the structures that are fetched but not parsed.  See :mod:`._hints`; the shared primitives are
in :mod:`._hint_records`.
"""

from __future__ import annotations

from h5sidecar.indexer.crawl._hint_records import (
    BadStructure,
    Hint,
    HintKind,
    Layout,
    Parser,
    View,
    address_hint,
    u,
)

__all__ = ["PARSERS"]


def _tree(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Version-1 B-tree node: group nodes point at nodes or symbol-table nodes; chunk nodes at
    nodes, or (leaves) at raw chunks: nothing to prefetch."""
    o = layout.offset_size
    head = view(hint.addr, min(hint.addr + 8, layout.size))
    if head[:4] != b"TREE":
        raise BadStructure(f"no TREE node at {hint.addr}")
    node_type, level, used = head[4], head[5], u(head, 6, 2)
    if node_type == 1 and level == 0:
        return []
    if node_type != 0 and not hint.extra:
        raise BadStructure("chunk B-tree node of unknown dimensionality")
    key = layout.length_size if node_type == 0 else 8 + 8 * hint.extra[0]
    first, stride = 8 + 2 * o, key + o
    data = view(hint.addr, min(hint.addr + first + used * stride + key, layout.size))
    kind: HintKind = ("snod" if level == 0 else "tree0") if node_type == 0 else "tree1"
    hints: list[Hint] = []
    for i in range(used):
        hints += address_hint(layout, kind, u(data, first + i * stride + key, o), extra=hint.extra)
    return hints


def _snod(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Symbol-table node: one entry (object header address, cached B-tree/heap) per link."""
    o = layout.offset_size
    head = view(hint.addr, min(hint.addr + 8, layout.size))
    if head[:4] != b"SNOD":
        raise BadStructure(f"no SNOD at {hint.addr}")
    count, entry = u(head, 6, 2), 2 * o + 24
    data = view(hint.addr, min(hint.addr + 8 + count * entry, layout.size))
    hints: list[Hint] = []
    for pos in range(8, 8 + count * entry, entry):
        hints += address_hint(layout, "ohdr", u(data, pos + o, o))
        if u(data, pos + 2 * o, 4) == 1:  # a subgroup, with its B-tree and heap cached here
            hints += address_hint(layout, "tree0", u(data, pos + 2 * o + 8, o))
            hints += address_hint(layout, "heap", u(data, pos + 3 * o + 8, o))
    return hints


def _heap(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Local heap header: its data segment (the group's link names) is elsewhere."""
    o, ln = layout.offset_size, layout.length_size
    data = view(hint.addr, min(hint.addr + 8 + 2 * ln + o, layout.size))
    if data[:4] != b"HEAP":
        raise BadStructure(f"no HEAP at {hint.addr}")
    return address_hint(layout, "blob", u(data, 8 + 2 * ln, o), max(u(data, 8, ln), 1))


def _gcol(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Global heap collection: fetch all of it (its size is in the header)."""
    head = view(hint.addr, min(hint.addr + 8 + layout.length_size, layout.size))
    if head[:4] != b"GCOL":
        raise BadStructure(f"no GCOL at {hint.addr}")
    view(hint.addr, min(hint.addr + u(head, 8, layout.length_size), layout.size))
    return []


def _blob(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """A structure HDF5 reads whole but that points nowhere the crawl follows (a local heap's
    data segment, a chunk index's data block, a B-tree leaf): fetch it only."""
    view(hint.addr, hint.addr + hint.size)
    return []


PARSERS: dict[str, Parser] = {
    "tree0": _tree,
    "tree1": _tree,
    "snod": _snod,
    "heap": _heap,
    "gcol": _gcol,
    "blob": _blob,
}
