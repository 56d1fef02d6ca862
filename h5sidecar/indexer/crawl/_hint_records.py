"""The primitives of the metadata hints: the records, the address arithmetic, the signals.

Shared by the classic-structure parsers (:mod:`._hints`) and the dense-storage ones
(:mod:`._dense_hints`), which both import this module (neither imports the other's
internals, so there is no import cycle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "SIGNATURE",
    "BadStructure",
    "Hint",
    "HintKind",
    "Layout",
    "Missing",
    "Parser",
    "View",
    "address_hint",
    "link_target",
    "u",
]

SIGNATURE = b"\x89HDF\r\n\x1a\n"

#: Kinds of structure a hint points at.  ``blob`` is fetched but not parsed; ``vlen`` is a
#: variable-length dataset's raw data (heap IDs); ``fspage`` is no structure: it carries the
#: file-space page size of a paged file (``size``).
HintKind = Literal[
    "ohdr",
    "ochk1",
    "ochk2",
    "tree0",
    "tree1",
    "snod",
    "heap",
    "gcol",
    "fahd",
    "eahd",
    "eaib",
    "bthd",
    "btin",
    "frhp",
    "fhib",
    "fhdb",
    "blob",
    "vlen",
    "fspage",
]

View = Callable[[int, int], bytes]
Parser = Callable[["Hint", View, "Layout"], list["Hint"]]


class Missing(Exception):  # a signal, not an error
    """Raised by a ``view`` when bytes ``[start, stop)`` are not available yet."""

    def __init__(self, start: int, stop: int) -> None:
        super().__init__(start, stop)
        self.start, self.stop = start, stop


class BadStructure(Exception):  # internal: the caller drops the hint
    """The bytes at a hinted address are not the expected structure."""


@dataclass(frozen=True, slots=True)
class Layout:
    """What the superblock says about address arithmetic.

    Attributes
    ----------
    base : int
        Absolute offset that file addresses are relative to (the superblock's position).
    offset_size, length_size : int
        Bytes per address and per length field (usually 8).
    eof : int
        End-of-file address declared by the superblock.
    size : int
        Actual size of the object.
    leaf_k, internal_k, chunk_k : int
        Version-1 B-tree "K" values (symbol-table node, group node and chunk node capacities
        halved); they fix the on-disk size of those nodes, which HDF5 reads whole.
    page : int
        File-space page size of a file written with paged aggregation (0: not paged, or not
        known): HDF5's page buffer reads metadata in whole pages of this size.
    """

    base: int
    offset_size: int
    length_size: int
    eof: int
    size: int
    leaf_k: int = 4
    internal_k: int = 16
    chunk_k: int = 32
    page: int = 0

    @property
    def undefined(self) -> int:
        """The "undefined address" value (all bits set)."""
        return (1 << (8 * self.offset_size)) - 1


@dataclass(frozen=True, slots=True)
class Hint:
    """A structure expected at ``addr`` (absolute), probably ``size`` bytes long.

    ``extra`` carries what parsing needs from the parent: the dimensionality (rank + 1) of a
    chunk B-tree, the message layout of a continuation chunk, a version-2 B-tree's geometry, a
    fractal heap's doubling table.
    """

    kind: HintKind
    addr: int
    size: int
    extra: tuple[int, ...] = ()


def u(data: bytes, off: int, n: int) -> int:
    """Little-endian unsigned integer of ``n`` bytes at ``off`` (:class:`BadStructure` if short)."""
    if off + n > len(data):
        raise BadStructure(f"field at {off}+{n} past the end of a {len(data)}-byte structure")
    return int.from_bytes(data[off : off + n], "little")


def address_hint(
    layout: Layout, kind: HintKind, addr: int, size: int = 0, extra: tuple[int, ...] = ()
) -> list[Hint]:
    """``[Hint]`` for a file address, or ``[]`` when it is undefined or outside the object."""
    if addr == layout.undefined:
        return []
    absolute = layout.base + addr
    if not 0 <= absolute < layout.size:
        return []
    size = size or _guess_size(kind, layout, extra)
    return [Hint(kind, absolute, min(size, layout.size - absolute), extra)]


def _guess_size(kind: HintKind, layout: Layout, extra: tuple[int, ...]) -> int:
    """Bytes HDF5 will read at a structure: whole version-1 B-tree and symbol-table nodes (sized
    by the K values), else its 512-byte speculative read, or a minimal global heap collection."""
    o, ln = layout.offset_size, layout.length_size
    if kind == "tree0":
        return 8 + 2 * o + (2 * layout.internal_k + 1) * ln + 2 * layout.internal_k * o
    if kind == "tree1" and extra:
        key = 8 + 8 * extra[0]
        return 8 + 2 * o + (2 * layout.chunk_k + 1) * key + 2 * layout.chunk_k * o
    if kind == "snod":
        return 8 + 2 * layout.leaf_k * (2 * o + 24)
    return 4096 if kind in ("gcol", "blob") else 512


def link_target(data: bytes, pos: int, layout: Layout) -> tuple[int, int] | None:
    """(object header address or -1 for soft/external links, encoded length) of the link message
    at ``pos``; ``None`` when the bytes are not a link message."""
    if data[pos] != 1:
        return None
    flags, start = data[pos + 1], pos
    link_type = data[pos + 2] if flags & 0x08 else 0
    pos += 2 + (1 if flags & 0x08 else 0) + (8 if flags & 0x04 else 0) + (1 if flags & 0x10 else 0)
    width = 1 << (flags & 0x03)
    pos += width + u(data, pos, width)
    if link_type == 0:
        return u(data, pos, layout.offset_size), pos + layout.offset_size - start
    if link_type in (1, 64):  # soft or external: a length-prefixed value
        return -1, pos + 2 + u(data, pos, 2) - start
    return None
