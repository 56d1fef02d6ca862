"""An attribute message's name, type and value, decoded as h5py would return them.

See :mod:`h5sidecar.indexer.attrs._messages` for why attributes are read from the metadata bytes.
The value produced is exactly ``obj.attrs[name]`` (a numpy scalar for a scalar dataspace, an
ndarray otherwise, ``h5py.Empty`` for a null dataspace, ``str`` for variable-length strings,
``np.bytes_`` for fixed-length ones) and the dtype exactly ``obj.attrs.get_id(name).dtype``, for
the types granules use: integers and IEEE floats of either byte order, fixed-length strings
(every padding, ASCII or UTF-8), variable-length strings and arrays of the fixed-size ones.
Any other type (compound, enum, references, opaque, bitfield, sequences, shared datatypes,
unusual float layouts) raises :class:`Unsupported` and that one attribute is read by h5py.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from h5sidecar.indexer.crawl._hint_records import BadStructure, Layout, u

__all__ = ["Decoded", "GlobalHeaps", "Unsupported", "decode_attribute", "object_addresses"]

View = Callable[[int, int], bytes]


class Unsupported(Exception):  # a signal, not an error: read this attribute through h5py
    """The attribute's type or data is not one this module decodes."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """One attribute: its name as h5py gives it (``bytes`` when not UTF-8), value and dtype;
    ``value`` is ``None`` when only the name could be read (read the rest through h5py), and
    then ``body`` is the message (see :func:`object_addresses`)."""

    name: str | bytes
    value: Any
    dtype: np.dtype | None
    body: bytes = b""


#: size -> (sign bit, exponent location, exponent size, mantissa size, bias) of IEEE floats
_IEEE = {
    2: (15, 10, 5, 10, 15),
    4: (31, 23, 8, 23, 127),
    8: (63, 52, 11, 52, 1023),
}
_NULLTERM, _NULLPAD, _SPACEPAD = 0, 1, 2
_ENCODINGS = {0: "ascii", 1: "utf-8"}


@dataclass(frozen=True, slots=True)
class _Type:
    """A decoded datatype: h5py's dtype for it, its size, and how to turn bytes into values."""

    kind: str  # "number", "string" (fixed length), "vlen" (variable-length string), "array"
    dtype: np.dtype
    size: int
    pad: int = _NULLPAD
    base: _Type | None = None
    dims: tuple[int, ...] = ()


class GlobalHeaps:
    """Global heap collections (variable-length strings) read through ``view``, the last few
    kept (attributes of one object usually share one)."""

    def __init__(self, view: View, layout: Layout, keep: int = 8) -> None:
        self.view, self.layout, self.keep = view, layout, keep
        self._collections: dict[int, dict[int, bytes]] = {}

    def object(self, addr: int, index: int) -> bytes:
        """The bytes of object ``index`` of the collection at file address ``addr``."""
        objects = self._collections.get(addr)
        if objects is None:
            objects = self._read(addr)
            if len(self._collections) >= self.keep:
                del self._collections[next(iter(self._collections))]
            self._collections[addr] = objects
        if index not in objects:
            raise Unsupported(f"no object {index} in the global heap at {addr}")
        return objects[index]

    def _read(self, addr: int) -> dict[int, bytes]:
        ln, start = self.layout.length_size, self.layout.base + addr
        head = self.view(start, min(start + 8 + ln, self.layout.size))
        if head[:4] != b"GCOL" or head[4] != 1:
            raise Unsupported(f"no global heap collection at {start}")
        size = u(head, 8, ln)
        if not 8 + ln <= size <= self.layout.size - start:
            raise Unsupported(f"global heap collection of {size} bytes at {start}")
        data = self.view(start, start + size)
        if len(data) < size:
            raise BadStructure(f"global heap collection at {start} past the end of the file")
        objects: dict[int, bytes] = {}
        pos = 8 + ln
        # an object's index and length read with one struct per object, not two int.from_bytes
        # (~15,000 objects on a granule of ~1,000 variables: their strings' attributes)
        unpack = _HEAP_OBJECT[ln].unpack_from if ln in _HEAP_OBJECT else None
        while pos + 8 + ln <= size:
            if unpack is not None:
                index, length = unpack(data, pos)
            else:
                index, length = u(data, pos, 2), u(data, pos + 8, ln)
            if index == 0:  # the free space: the last object
                break
            if pos + 8 + ln + length > size:
                raise Unsupported(f"global heap object {index} past its collection at {start}")
            objects[index] = data[pos + 8 + ln : pos + 8 + ln + length]
            pos += 8 + ln + ((length + 7) & ~7)
        return objects


_SIZES = struct.Struct("<HHH")
#: A global heap object's header by the file's length size: index, reference count and
#: reserved bytes (skipped), object size.
_HEAP_OBJECT = {4: struct.Struct("<H6xI"), 8: struct.Struct("<H6xQ")}


def decode_attribute(body: bytes, heaps: GlobalHeaps) -> Decoded:
    """Decode one attribute message.

    Raises
    ------
    Unsupported
        The message itself cannot be parsed (not even its name).  A type or value this module
        does not decode gives ``Decoded(name, None, None)`` instead.
    """
    try:
        version = body[0]
        if version not in (1, 2, 3):
            raise Unsupported(f"attribute message version {version}")
        sizes = _SIZES.unpack_from(body, 2)  # of the name, the datatype, the dataspace
    except (IndexError, struct.error) as exc:
        raise Unsupported(f"attribute message: {exc}") from exc
    if version == 1:
        stop = 8 + sum((n + 7) & ~7 for n in sizes)
    else:
        stop = (9 if version == 3 else 8) + sizes[0] + sizes[1] + sizes[2]
    # everything before the value (name, datatype, dataspace) repeats from one object to the
    # next (every array's ``units``, ``long_name``, ...): parsed once per distinct prefix
    name, htype, shape = _head(body[:stop], heaps.layout.offset_size, heaps.layout.length_size)
    if htype is None:
        return Decoded(name, None, None, body)
    if shape is None:
        return Decoded(name, h5py.Empty(htype.dtype), htype.dtype)
    try:
        nbytes = math.prod(shape) * htype.size
        if stop + nbytes > len(body):
            raise Unsupported("attribute data shorter than its dataspace")
        value = _value(htype, shape, body[stop : stop + nbytes], heaps)
    except (Unsupported, BadStructure, IndexError, ValueError, UnicodeDecodeError):
        return Decoded(name, None, None, body)
    return Decoded(name, value, htype.dtype)


@functools.lru_cache(maxsize=4096)
def _head(
    prefix: bytes, offset_size: int, length_size: int
) -> tuple[str | bytes, _Type | None, tuple[int, ...] | None]:
    """(name, datatype, shape) of an attribute message whose bytes before the value are
    ``prefix``; the datatype is ``None`` when it or the dataspace is not decoded here (shared,
    or a type this module leaves to h5py)."""
    version = prefix[0]
    sizes = _SIZES.unpack_from(prefix, 2)
    padded = tuple((n + 7) & ~7 for n in sizes) if version == 1 else sizes
    pos = 9 if version == 3 else 8
    name = _name(prefix[pos : pos + sizes[0]])
    if version > 1 and prefix[1] & 0x03:  # shared datatype or dataspace: a pointer elsewhere
        return name, None, None
    try:
        pos += padded[0]
        htype = _datatype(prefix[pos : pos + sizes[1]], offset_size)
        pos += padded[1]
        shape = _dataspace(prefix[pos : pos + sizes[2]], length_size)
    except (Unsupported, BadStructure, IndexError, ValueError, UnicodeDecodeError):
        return name, None, None
    return name, htype, shape


def object_addresses(body: bytes, heaps: GlobalHeaps) -> list[list[int]]:
    """The addresses the references of a ``DIMENSION_LIST`` attribute point at, per axis: a
    1-D array of variable-length sequences of (version 1) object references, whose values are
    the targets' object header addresses.

    Raises
    ------
    Unsupported
        Any other type or layout (read it through h5py).
    """
    o = heaps.layout.offset_size
    try:
        version = body[0]
        if version not in (1, 2, 3) or (version > 1 and body[1] & 0x03):
            raise Unsupported(f"attribute message version {version} or shared parts")
        sizes = _SIZES.unpack_from(body, 2)
        padded = tuple((n + 7) & ~7 for n in sizes) if version == 1 else sizes
        pos = (9 if version == 3 else 8) + padded[0]
        dt, base = body[pos : pos + sizes[1]], body[pos + 8 : pos + sizes[1]]
        pos += padded[1]
        shape = _dataspace(body[pos : pos + sizes[2]], heaps.layout.length_size)
        pos += padded[2]
        if dt[0] & 0x0F != 9 or dt[1] & 0x0F != 0:
            raise Unsupported("not a variable-length sequence")
        if base[0] != 0x17 or base[1] & 0x0F != 0 or u(base, 4, 4) != o:
            raise Unsupported("not a sequence of version-1 object references")
        if shape is None or len(shape) != 1:
            raise Unsupported("not a 1-D array")
        out = []
        for at in range(pos, pos + shape[0] * (8 + o), 8 + o):
            count = u(body, at, 4)
            raw = heaps.object(u(body, at + 4, o), u(body, at + 4 + o, 4)) if count else b""
            if len(raw) < count * o:
                raise Unsupported("sequence longer than its heap object")
            out.append([int.from_bytes(raw[i : i + o], "little") for i in range(0, count * o, o)])
        return out
    except (BadStructure, IndexError, ValueError, struct.error) as exc:
        raise Unsupported(f"DIMENSION_LIST: {exc}") from exc


def _name(raw: bytes) -> str | bytes:
    """As h5py's ``_d`` gives names: ``str`` when UTF-8, else the bytes (HDF5 stops at NUL)."""
    raw = raw.split(b"\0", 1)[0]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


@functools.lru_cache(maxsize=4096)  # a granule's attributes share a few dozen types
def _datatype(data: bytes, offset_size: int) -> _Type:
    cls, version, bits, size = data[0] & 0x0F, data[0] >> 4, data[1:4], u(data, 4, 4)
    if cls == 0:  # fixed-point: whole bytes only (h5py maps other precisions differently)
        whole = u(data, 8, 2) == 0 and u(data, 10, 2) == 8 * size
        if bits[0] & 0x06 or not whole or size not in (1, 2, 4, 8):
            raise Unsupported("integer with padding bits or an odd size")
        kind = "i" if bits[0] & 0x08 else "u"
        return _Type("number", np.dtype(f"{'>' if bits[0] & 1 else '<'}{kind}{size}"), size)
    if cls == 1:  # IEEE layouts only, little- or big-endian (not VAX), no padding bits
        ieee = _IEEE.get(size)
        fields = (bits[1], data[12], data[13], data[15], u(data, 16, 4))
        if (
            ieee is None
            or fields != ieee
            or bits[0] & 0x4E
            or (bits[0] >> 4) & 0x03 != 2  # the mantissa's leading 1 is implied
            or u(data, 8, 2) != 0
            or u(data, 10, 2) != 8 * size
            or data[14] != 0
        ):
            raise Unsupported("a float that is not IEEE")
        return _Type("number", np.dtype(f"{'>' if bits[0] & 1 else '<'}f{size}"), size)
    if cls == 3:
        pad, cset = bits[0] & 0x0F, bits[0] >> 4
        if pad > _SPACEPAD or cset not in _ENCODINGS or size == 0:
            raise Unsupported("string with an unknown padding or character set")
        return _Type("string", h5py.string_dtype(_ENCODINGS[cset], size), size, pad)
    if cls == 9:
        if bits[0] & 0x0F != 1 or (bits[1] & 0x0F) not in _ENCODINGS:
            raise Unsupported("variable-length sequence")
        dtype = h5py.string_dtype(_ENCODINGS[bits[1] & 0x0F])
        return _Type("vlen", dtype, 4 + offset_size + 4)
    if cls == 10 and version in (2, 3):
        rank = data[8]
        pos = 9 if version == 3 else 12
        dims = tuple(u(data, pos + 4 * i, 4) for i in range(rank))
        pos += 4 * rank * (1 if version == 3 else 2)  # version 2 adds permutation indices
        base = _datatype(data[pos:], offset_size)
        if base.kind not in ("number", "string") or base.size * math.prod(dims) != size:
            raise Unsupported("array of a type not decoded here")
        return _Type("array", np.dtype((base.dtype, dims)), size, base=base, dims=dims)
    raise Unsupported(f"datatype class {cls}")


@functools.lru_cache(maxsize=4096)
def _dataspace(data: bytes, length_size: int) -> tuple[int, ...] | None:
    """The shape (``()`` scalar), ``None`` for a null dataspace."""
    version, rank, flags = data[0], data[1], data[2]
    if version == 1:
        pos, kind = 8, 1 if rank else 0
    elif version == 2:
        pos, kind = 4, data[3]
    else:
        raise Unsupported(f"dataspace version {version}")
    if kind == 2:
        return None
    if kind == 0:
        return ()
    if kind != 1 or flags & ~0x03:
        raise Unsupported(f"dataspace type {kind}")
    ln = length_size
    return tuple(u(data, pos + i * ln, ln) for i in range(rank))


def _value(htype: _Type, shape: tuple[int, ...], data: bytes, heaps: GlobalHeaps) -> Any:
    """What h5py's ``AttributeManager.__getitem__`` returns for these bytes."""
    if htype.kind == "array":
        assert htype.base is not None
        shape, htype = shape + htype.dims, htype.base
    if htype.kind == "vlen":
        if not shape:  # what ``arr[()]`` of a 0-d object array gives
            return _vlen(data, 0, heaps)
        items = [_vlen(data, i * htype.size, heaps) for i in range(math.prod(shape))]
        return np.array(items, dtype=htype.dtype).reshape(shape)
    if htype.kind == "string" and htype.pad != _NULLPAD:
        data = _to_nullpad(data, htype.size, htype.pad)
    flat = np.frombuffer(data, dtype=htype.dtype)
    if not shape:  # a numpy scalar, as ``arr[()]`` gives it
        return flat[0]
    return flat.reshape(shape).copy()


def _to_nullpad(data: bytes, size: int, pad: int) -> bytes:
    """Fixed strings as HDF5 converts them to h5py's null-padded memory type
    (``H5T__conv_s_s``): a null-terminated one ends at its first NUL (or fills its size), a
    space-padded one loses its trailing spaces."""
    out = []
    for pos in range(0, len(data), size):
        item = data[pos : pos + size]
        if pad == _NULLTERM:
            item = item.split(b"\0", 1)[0]
        else:
            item = item.rstrip(b" ")
        out.append(item.ljust(size, b"\0"))
    return b"".join(out)


#: offset size -> the struct of a variable-length element (length, heap address, index)
_VLEN = {4: struct.Struct("<III"), 8: struct.Struct("<IQI")}


def _vlen(data: bytes, pos: int, heaps: GlobalHeaps) -> str:
    """One variable-length string as h5py gives it: read as a C string (up to its first NUL)
    and decoded as UTF-8 with surrogate escapes, whatever its character set."""
    o = heaps.layout.offset_size
    element = _VLEN.get(o)
    if element is not None and pos + element.size <= len(data):
        length, addr, index = element.unpack_from(data, pos)
    else:  # another offset size, or a short element (read as the slices give it)
        length = int.from_bytes(data[pos : pos + 4], "little")
        addr = int.from_bytes(data[pos + 4 : pos + 4 + o], "little")
        index = int.from_bytes(data[pos + 4 + o : pos + 8 + o], "little")
    if length == 0:
        return ""
    raw = heaps.object(addr, index)
    if len(raw) < length:
        raise Unsupported("variable-length string longer than its heap object")
    return raw[:length].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
