"""An object header's messages, found in its bytes: its chunks, continuations and checksums.

The walk shared by the attribute reader (:mod:`h5sidecar.indexer.attrs._messages`) and the
creation-property reader (:mod:`h5sidecar.indexer.attrs._creation_messages`): both read the
header bytes HDF5 has just read instead of asking h5py for each message.  Only what is fully
understood is served: anything odd (a header version not read here, a checksum mismatch, a
message or a continuation chunk outside its bounds) raises :class:`NotNative` and the object is
read through h5py, never guessed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from numcodecs.checksum32 import jenkins_lookup3

from h5sidecar.indexer.crawl._hint_records import BadStructure, Layout, u

__all__ = [
    "CONTINUATION",
    "CREATION_TYPES",
    "MAX_CHUNKS",
    "NotNative",
    "View",
    "checked",
    "chunk_messages",
    "continuation_chunk",
    "first_chunk",
    "object_messages",
]

View = Callable[[int, int], bytes]

#: The object header continuation message type.
CONTINUATION = 0x10
#: More continuation chunks or heap blocks than this is a corrupt (looping) header.
MAX_CHUNKS = 1024
#: A dataset's datatype, fill value (old and new), external storage, layout and filter
#: pipeline messages: what its creation properties are read from.
CREATION_TYPES = frozenset({0x03, 0x04, 0x05, 0x07, 0x08, 0x0B})


class NotNative(Exception):  # a signal, not an error: read this object through h5py
    """The object's header holds something the native readers do not read."""


def checked(data: bytes, what: str) -> bytes:
    """``data`` without its trailing Jenkins lookup3 checksum, which must match."""
    if len(data) < 4 or jenkins_lookup3(data[:-4], 0) != u(data, len(data) - 4, 4):
        raise NotNative(f"{what}: checksum mismatch")
    return data[:-4]


def first_chunk(start: int, view: View, layout: Layout) -> tuple[bytes, bytes, int, bool]:
    """(the header's first bytes, its first chunk's messages, its flags, whether it tracks
    attributes' creation order) of the object header at absolute offset ``start``."""
    head = view(start, min(start + 64, layout.size))
    if head[:4] == b"OHDR":
        if head[4] != 2:
            raise NotNative(f"object header version {head[4]}")
        flags = head[5]
        pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 0x03)
        size = u(head, pos, width)
        first = checked(view(start, start + pos + width + size + 4), "object header")
        chunks = [first[pos + width :]]
        tracked = bool(flags & 0x04)
    elif len(head) >= 16 and head[0] == 1:
        flags, tracked = 0, False
        chunks = [view(start + 16, start + 16 + u(head, 8, 4))]
    else:
        raise NotNative(f"no object header at {start}")
    return head, chunks[0], flags, tracked


def object_messages(
    addr: int, view: View, layout: Layout, wanted: frozenset[int]
) -> list[tuple[int, int, bytes]]:
    """(type, flags, body) of the messages of types ``wanted`` of the object whose header is
    at file address ``addr``, continuation chunks followed, in storage order.

    Raises
    ------
    NotNative
        A header not understood (as :func:`~._messages.attribute_messages`).
    """
    try:
        head, first, flags, _ = first_chunk(layout.base + addr, view, layout)
        chunks = [first]
        found: list[tuple[int, int, bytes]] = []
        i = 0
        while i < len(chunks):
            if len(chunks) > MAX_CHUNKS:
                raise NotNative("too many continuation chunks")
            for mtype, mflags, _, body in chunk_messages(chunks[i], head[0] == 1, flags,
                                                         wanted | {CONTINUATION}):  # fmt: skip
                if mtype == CONTINUATION:
                    chunks.append(continuation_chunk(body, head[0] == 1, view, layout))
                elif mtype in wanted:
                    found.append((mtype, mflags, body))
            i += 1
        return found
    except (BadStructure, IndexError, ValueError) as exc:
        raise NotNative(str(exc)) from exc


_V1, _V2, _V2_TRACKED = struct.Struct("<HHB"), struct.Struct("<BHB"), struct.Struct("<BHBH")


def chunk_messages(data: bytes, v1: bool, flags: int, wanted: frozenset[int]
                   ) -> list[tuple[int, int, int, bytes]]:  # fmt: skip
    """(type, flags, creation order, body) of each message of one header chunk whose type is
    ``wanted``; the others (a dataset's datatype, layout, filters, ...) are stepped over
    without copying them out."""
    out = []
    pos = 0
    end = len(data)
    if v1:
        unpack = _V1.unpack_from
        while pos + 8 <= end:
            mtype, size, mflags = unpack(data, pos)
            if mtype in wanted:
                out.append((mtype, mflags, 0, data[pos + 8 : pos + 8 + size]))
            pos += 8 + size
        return out
    tracked = flags & 0x04
    header = 6 if tracked else 4
    unpack = (_V2_TRACKED if tracked else _V2).unpack_from
    order = 0
    while pos + header <= end:  # a gap shorter than a message header may end a chunk
        if tracked:
            mtype, size, mflags, order = unpack(data, pos)
        else:
            mtype, size, mflags = unpack(data, pos)
        stop = pos + header + size
        if stop > end:
            raise NotNative("a message runs past the end of its chunk")
        if mtype in wanted:
            out.append((mtype, mflags, order, data[pos + header : stop]))
        pos = stop
    return out


def continuation_chunk(body: bytes, v1: bool, view: View, layout: Layout) -> bytes:
    """The messages of the continuation chunk a continuation message's ``body`` points at."""
    o = layout.offset_size
    start = layout.base + u(body, 0, o)
    length = u(body, o, layout.length_size)
    if not 0 < length <= layout.size - start:
        raise NotNative("continuation chunk outside the file")
    data = view(start, start + length)
    if v1:
        return data
    if data[:4] != b"OCHK":
        raise NotNative(f"no OCHK at {start}")
    return checked(data, "continuation chunk")[4:]
