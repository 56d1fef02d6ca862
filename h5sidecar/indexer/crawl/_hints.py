"""Where HDF5 will read next: addresses of metadata structures, parsed from metadata already read.

The indexer's metadata crawl (:class:`h5sidecar.indexer.crawl._source_file.MetadataCrawl`) uses these
*hints* to fetch metadata before h5py asks for it.  HDF5 reads its metadata one small structure at a time (object
headers, B-tree nodes, symbol-table nodes, heaps), each found through an address stored in the
one read before; over a network every such step costs a round trip.  Parsing just enough of each
structure to learn the addresses it points to lets the reader fetch a whole level of the tree at
once, concurrently, while h5py is still busy with the level above.

Hints are advice: a wrong or missing hint costs bytes or a round trip, never correctness, because
h5py still reads everything it needs through the cache.  So parsers here are deliberately partial
(the common structures of superblock versions 0-3), validate lightly, and report anything they do
not understand as :class:`BadStructure` for the caller to drop.  This module holds the superblock
(and a paged file's page size), object headers and their messages; :mod:`._heap_hints` version-1
B-trees, symbol-table nodes and heaps; :mod:`._dense_hints` the newer indexes and dense storage;
:mod:`._vlen_hints` the global heap collections variable-length values point at;
:mod:`._hint_records` the records and primitives they share.

Each parser takes ``view(start, stop) -> bytes`` (absolute offsets) and lets :class:`Missing`
(raised by ``view``) escape when bytes it needs are not available yet; the caller fetches them
and calls again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from h5sidecar.errors import NotHDF5Error
from h5sidecar.indexer.crawl._dense_hints import PARSERS as _DENSE
from h5sidecar.indexer.crawl._heap_hints import PARSERS as _HEAPS
from h5sidecar.indexer.crawl._hint_records import (
    SIGNATURE,
    BadStructure,
    Hint,
    HintKind,
    Layout,
    Missing,
    Parser,
    View,
    address_hint,
    link_target,
    u,
)
from h5sidecar.indexer.crawl._vlen_hints import PARSERS as _VLEN
from h5sidecar.indexer.crawl._vlen_hints import vlen_values

__all__ = [
    "SIGNATURE",
    "BadStructure",
    "Hint",
    "HintKind",
    "Layout",
    "Missing",
    "expand",
    "file_space_page",
    "find_superblock",
    "link_target",
]


def find_superblock(view: View, size: int) -> tuple[Layout, list[Hint]]:
    """Locate and parse the superblock; the first hints are the root group's structures.

    HDF5 looks for the signature at offset 0, 512, 1024, 2048, ... (a user block may precede it).

    Raises
    ------
    NotHDF5Error
        No signature, an unknown superblock version, or an object shorter than the end-of-file
        address its superblock declares (truncated).
    """
    pos = 0
    while pos + 8 <= size:
        if view(pos, pos + 8) == SIGNATURE:
            return _parse_superblock(view(pos, min(size, pos + 256)), pos, size)
        pos = 512 if pos == 0 else pos * 2
    head = view(0, min(size, 4))
    if head in (b"CDF\x01", b"CDF\x02", b"CDF\x05"):
        raise NotHDF5Error(
            "this is a netCDF-3 (classic or 64-bit offset) file, not HDF5/netCDF-4: h5sidecar "
            "indexes HDF5 and netCDF-4 files only (kerchunk's NetCDF3ToZarr references "
            "netCDF-3 files)"
        ).with_hint(
            "a netCDF-3 file, which h5sidecar does not index: leave it out (index --pattern "
            "GLOB, or patterns= of index_many); kerchunk's NetCDF3ToZarr references it"
        )
    if head[:2] == b"\x1f\x8b":
        raise NotHDF5Error(
            "this is a gzip-compressed file, not HDF5: HDF5 chunks cannot be read by byte range "
            "inside a .gz; store the file uncompressed (gunzip it) and index that"
        ).with_hint("a gzip-compressed file: gunzip it and index the uncompressed file")
    raise NotHDF5Error(
        f"no HDF5 signature at offset 0, 512, 1024, ... of this {size}-byte object: it is not an "
        "HDF5/netCDF-4 file (check the URL, or whether the object is truncated or corrupt)"
    )


def _parse_superblock(head: bytes, pos: int, size: int) -> tuple[Layout, list[Hint]]:
    version = head[8] if len(head) > 8 else -1
    if version in (0, 1):
        osz, lsz, p = head[13], head[14], 24 + 4 * version
    elif version in (2, 3):
        osz, lsz, p = head[9], head[10], 12
    else:
        raise NotHDF5Error(f"unknown HDF5 superblock version {version}: the file is corrupt")
    if osz not in (2, 4, 8) or lsz not in (2, 4, 8):
        raise NotHDF5Error(f"corrupt HDF5 superblock (address size {osz}, length size {lsz})")
    # Addresses are relative to the superblock's position (HDF5 rebases onto it when the stored
    # base address disagrees); the end-of-file address is absolute.
    try:
        eof = u(head, p + 2 * osz, osz)
        layout = Layout(base=pos, offset_size=osz, length_size=lsz, eof=eof, size=size)
        if version in (0, 1):
            chunk_k = u(head, 24, 2) if version == 1 else 32
            layout = replace(
                layout, leaf_k=u(head, 16, 2), internal_k=u(head, 18, 2), chunk_k=chunk_k
            )
    except BadStructure as exc:
        raise NotHDF5Error(f"truncated HDF5 superblock ({size} bytes in all)") from exc
    if eof > size:
        raise NotHDF5Error(
            f"truncated HDF5 file: its superblock declares {eof} bytes but the object has {size}; "
            "re-copy or re-download it"
        )
    if version >= 2:  # superblock extension and root group object header
        return layout, (
            address_hint(layout, "ohdr", u(head, p + osz, osz))
            + address_hint(layout, "ohdr", u(head, p + 3 * osz, osz))
        )
    entry = p + 4 * osz  # the root group's symbol-table entry
    hints = address_hint(layout, "ohdr", u(head, entry + osz, osz))
    if u(head, entry + 2 * osz, 4) == 1:  # with cached B-tree and local heap addresses
        hints += address_hint(layout, "tree0", u(head, entry + 2 * osz + 8, osz))
        hints += address_hint(layout, "heap", u(head, entry + 3 * osz + 8, osz))
    return layout, hints


#: Continuation chunks followed in a superblock extension before giving up on its page size
#: (HDF5 writes one or two; a corrupt header could chain any number).
MAX_EXTENSION_CHUNKS = 8


def file_space_page(view: View, layout: Layout) -> int:
    """The file-space page size of a file written with paged aggregation, else 0.

    It is kept in the File Space Info message of the superblock extension (superblocks 2 and
    3), which may sit in a continuation chunk.  With HDF5's page buffer every metadata read
    of such a file is a whole page, so the crawl fetches whole pages (see
    :class:`~h5sidecar.indexer.crawl._source_file.MetadataCrawl`).

    Raises
    ------
    Missing
        From ``view``, when it cannot block for bytes.
    """
    o = layout.offset_size
    head = view(layout.base, min(layout.size, layout.base + 12 + 2 * o))
    if len(head) < 12 + 2 * o or head[8] < 2:
        return 0  # superblocks 0 and 1 have no extension
    todo = address_hint(layout, "ohdr", u(head, 12 + o, o))
    for _ in range(MAX_EXTENSION_CHUNKS):
        if not todo:
            break
        try:
            found = expand(todo.pop(), view, layout)
        except BadStructure:
            return 0
        for hint in found:
            if hint.kind == "fspage":
                return hint.size
        todo += [hint for hint in found if hint.kind in ("ochk1", "ochk2")]
    return 0


def expand(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """The hints found in the structure ``hint`` points at.

    Raises
    ------
    Missing
        From ``view``: fetch those bytes and call again.
    BadStructure
        The bytes are not the expected structure (drop the hint).
    """
    parser = _PARSERS.get(hint.kind)
    if parser is None:
        return []
    try:
        return parser(hint, view, layout)
    except (IndexError, ValueError) as exc:  # short or garbled bytes: not the structure we hoped
        raise BadStructure(f"{hint.kind} at {hint.addr}: {exc}") from exc


# -- object headers -------------------------------------------------------------------------------
def _ohdr(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """Object header: version 1 (no signature, messages after a 16-byte prefix) or 2 (``OHDR``)."""
    head = view(hint.addr, min(hint.addr + 64, layout.size))
    if head[:4] == b"OHDR":
        flags = head[5]
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 0x03)
        start = hint.addr + pos + width
        data = view(start, min(start + u(head, pos, width), layout.size))
        return _messages_v2(data, flags, layout)
    if len(head) < 16 or head[0] != 1 or head[1] != 0:
        raise BadStructure(f"no object header at {hint.addr}")
    start = hint.addr + 16
    return _messages_v1(view(start, min(start + u(head, 8, 4), layout.size)), layout)


def _ochk1(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """A version-1 continuation chunk: bare messages, ``size`` bytes long."""
    return _messages_v1(view(hint.addr, hint.addr + hint.size), layout)


def _ochk2(hint: Hint, view: View, layout: Layout) -> list[Hint]:
    """A version-2 continuation chunk (``OCHK`` + messages + checksum).  Its messages are laid
    out per the parent header's flags, carried in ``extra``."""
    data = view(hint.addr, hint.addr + hint.size)
    if data[:4] != b"OCHK":
        raise BadStructure(f"no OCHK at {hint.addr}")
    return _messages_v2(data[4:-4], hint.extra[0] if hint.extra else 0, layout)


def _messages_v1(data: bytes, layout: Layout) -> list[Hint]:
    hints: list[Hint] = []
    bodies: dict[int, bytes] = {}
    pos = 0
    while pos + 8 <= len(data):
        mtype, msize, mflags = u(data, pos, 2), u(data, pos + 2, 2), data[pos + 4]
        body = data[pos + 8 : pos + 8 + msize]
        hints += _message(mtype, mflags, body, layout, v1=True)
        bodies.setdefault(mtype, body)
        pos += 8 + msize
    return hints + vlen_values(bodies, layout)


def _messages_v2(data: bytes, oh_flags: int, layout: Layout) -> list[Hint]:
    hints: list[Hint] = []
    bodies: dict[int, bytes] = {}
    header = 6 if oh_flags & 0x04 else 4  # + creation order when the header tracks it
    pos = 0
    while pos + header <= len(data):
        mtype, msize, mflags = data[pos], u(data, pos + 1, 2), data[pos + 3]
        body = data[pos + header : pos + header + msize]
        found = _message(mtype, mflags, body, layout, False)
        if mtype == 0x10:  # a continuation's messages are laid out like these
            found = [replace(h, extra=(oh_flags & 0x04,)) for h in found]
        hints += found
        bodies.setdefault(mtype, body)
        pos += header + msize
    return hints + vlen_values(bodies, layout)


def _message(mtype: int, mflags: int, body: bytes, layout: Layout, v1: bool) -> list[Hint]:
    """Hints from one header message (shared messages are skipped: their body is a pointer)."""
    handler = _MESSAGES.get(mtype)
    if handler is None or mflags & 0x02:
        return []
    try:
        return handler(body, layout, v1)
    except (BadStructure, IndexError):
        return []  # one odd message does not spoil the rest of the header


def _msg_continuation(body: bytes, layout: Layout, v1: bool) -> list[Hint]:
    o = layout.offset_size
    length = max(u(body, o, layout.length_size), 1)
    return address_hint(layout, "ochk1" if v1 else "ochk2", u(body, 0, o), length)


def _msg_symbol_table(body: bytes, layout: Layout, v1: bool) -> list[Hint]:
    o = layout.offset_size
    return address_hint(layout, "tree0", u(body, 0, o)) + address_hint(
        layout, "heap", u(body, o, o)
    )


def _msg_layout(body: bytes, layout: Layout, v1: bool) -> list[Hint]:
    """Data layout message: where a chunked dataset's chunk index starts (the address of single
    and implicit indexes is raw data: nothing to prefetch)."""
    o, version, cls = layout.offset_size, body[0], body[1]
    if version in (1, 2) and body[2] == 2:
        return address_hint(layout, "tree1", u(body, 8, o), extra=(body[1],))
    if version == 3 and cls == 2:
        return address_hint(layout, "tree1", u(body, 3, o), extra=(body[2],))
    if version in (4, 5) and cls == 2:
        dims, enc = body[3], body[4]
        pos = 5 + dims * enc
        index = body[pos]
        kinds: dict[int, tuple[HintKind, int]] = {3: ("fahd", 1), 4: ("eahd", 5), 5: ("bthd", 6)}
        if index not in kinds:
            return []
        kind, info = kinds[index]
        return address_hint(layout, kind, u(body, pos + 1 + info, o))
    if version in (4, 5) and cls == 3:  # virtual: the mapping lives in the global heap
        return address_hint(layout, "gcol", u(body, 2, o))
    return []


def _msg_link(body: bytes, layout: Layout, v1: bool) -> list[Hint]:
    """Link message (compact groups, and dense groups' heap objects): hard links point at object
    headers."""
    target = link_target(body, 0, layout)
    return [] if target is None else address_hint(layout, "ohdr", target[0])


def _msg_dense_index(creation_order_width: int, links: int) -> Callable[..., list[Hint]]:
    """Link-info (0x02) / attribute-info (0x15) message: dense storage in a fractal heap, indexed
    by name in a version-2 B-tree."""

    def parse(body: bytes, layout: Layout, v1: bool) -> list[Hint]:
        o = layout.offset_size
        if body[0] != 0:
            return []
        pos = 2 + (creation_order_width if body[1] & 0x01 else 0)
        return address_hint(layout, "frhp", u(body, pos, o), extra=(links,)) + address_hint(
            layout, "bthd", u(body, pos + o, o)
        )

    return parse


def _msg_file_space(body: bytes, layout: Layout, v1: bool) -> list[Hint]:
    """File Space Info message (version 1; the superblock extension's): strategy 1 is paged
    aggregation, and its page size follows the free-space section threshold."""
    if body[0] != 1 or body[1] != 1:
        return []
    page = u(body, 3 + layout.length_size, layout.length_size)
    return [Hint("fspage", 0, page)] if page > 0 else []


def _msg_attribute(body: bytes, layout: Layout, v1: bool) -> list[Hint]:
    """Attribute message: a variable-length value (h5py's default for str) lives in a global
    heap collection; its data starts with (length, collection address, index)."""
    version = body[0]
    if version not in (1, 2, 3) or (version > 1 and body[1] & 0x01):  # shared datatype
        return []
    sizes = [u(body, 2, 2), u(body, 4, 2), u(body, 6, 2)]  # name, datatype, dataspace
    if version == 1:
        sizes = [(n + 7) & ~7 for n in sizes]
    pos = 8 + (1 if version == 3 else 0) + sizes[0]
    if body[pos] & 0x0F != 9 or u(body, pos + sizes[1] + sizes[2], 4) == 0:
        return []  # not variable-length, or empty
    return address_hint(layout, "gcol", u(body, pos + sizes[1] + sizes[2] + 4, layout.offset_size))


_MESSAGES: dict[int, Callable[[bytes, Layout, bool], list[Hint]]] = {
    0x02: _msg_dense_index(8, links=1),
    0x06: _msg_link,
    0x08: _msg_layout,
    0x0C: _msg_attribute,
    0x10: _msg_continuation,
    0x11: _msg_symbol_table,
    0x15: _msg_dense_index(2, links=0),
    0x17: _msg_file_space,
}


_PARSERS: dict[str, Parser] = {
    "ohdr": _ohdr,
    "ochk1": _ochk1,
    "ochk2": _ochk2,
    **_HEAPS,
    **_DENSE,
    **_VLEN,
}
