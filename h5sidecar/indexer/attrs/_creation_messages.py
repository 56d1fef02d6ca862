"""A dataset's creation properties (layout, chunk shape, filter pipeline, fill value) read from
the messages of its object header, instead of a creation property list copied out of HDF5.

HDF5 builds a dataset's creation property list from these same messages when the dataset is
opened; ``DatasetID.get_create_plist()`` then copies that list and h5py frees it later: ~25 us
a dataset with the fill value's conversion, ~3-4% of indexing a granule of ~1,000 variables
whose header bytes the attribute reader has already read (:mod:`._object_header`).

:class:`NativeCreation` answers the calls the indexer and h5py's ``Dataset.chunks`` make
(``get_layout``, ``get_chunk``, ``get_nfilters``, ``get_filter``, ``get_external_count``,
``get_fill_value``) from the messages, for the common cases only; anything else (another
method, or a message it does not decode) is asked of HDF5's own list, copied on first need.
Decoded here: layout messages version 3-5 (compact, contiguous, chunked; virtual as its
class only), filter pipeline messages version 1 and 2, fill value messages version 1-3 with a
value (version 3 also without one) and a dataset with none.  Left to HDF5: layout messages
version 1 and 2 or of an unknown class, a version 1 or 2 fill value message without a value,
an undefined fill value, an old-style fill value message (0x04) alone, shared messages
(datatype, pipeline or fill value kept in the shared message table), external storage, a fill
value of any type other than a plain integer or IEEE float of the dataset's own size, filters
with more than 16 client values or a name longer than 255 bytes (more than h5py's
``get_filter`` reads), and unnamed filters that are not HDF5's own (whose name HDF5 looks up in
its filter registry).
"""

from __future__ import annotations

import struct
from typing import Any

import h5py
import numpy as np

from h5sidecar.indexer.attrs._object_header import (
    CREATION_TYPES,
    NotNative,
    View,
    object_messages,
)
from h5sidecar.indexer.crawl._hint_records import Layout, u

__all__ = ["NativeCreation", "creation_messages", "decode_creation"]

_DATATYPE, _OLD_FILL, _FILL, _EXTERNAL, _LAYOUT, _PIPELINE = 0x03, 0x04, 0x05, 0x07, 0x08, 0x0B
#: Layout classes of layout messages version 3 and 4, as h5py's constants.
_LAYOUTS = {0: h5py.h5d.COMPACT, 1: h5py.h5d.CONTIGUOUS, 2: h5py.h5d.CHUNKED,
            3: h5py.h5d.VIRTUAL}  # fmt: skip
#: The names HDF5 reports for its own filters when the file records none (pipeline version 2
#: leaves the name out for filter ids below 256): ``H5Z_find(id)->name``.
_BUILTIN_NAMES = {1: b"deflate", 2: b"shuffle", 3: b"fletcher32", 4: b"szip", 5: b"nbit",
                  6: b"scaleoffset"}  # fmt: skip
#: h5py's ``get_filter`` reads at most this many client values and name bytes.
_MAX_CD, _MAX_NAME = 16, 255
#: Layout message (version 4+) flag: partial edge chunks stored without the filters.
_DONT_FILTER_PARTIAL = 0x01
_FILTER_V1 = struct.Struct("<HHHH")


class NativeCreation:
    """The creation properties of one dataset, from its header messages (see the module
    docstring for what is decoded and what is asked of ``dset``'s own property list).

    Attributes
    ----------
    chunk_options : int or None
        ``H5Pget_chunk_opts`` of a chunked dataset when known from its layout message (0: a
        version 3 message, which cannot record any, or a later one without the "do not
        filter partial edge chunks" flag); ``None`` otherwise (ask HDF5).
    """

    def __init__(self, dset: h5py.Dataset, layout: tuple[int, tuple[int, ...] | None, int | None],
                 filters: list[tuple[int, int, tuple[int, ...], bytes]],
                 fill: bytes | None, fill_type: np.dtype | None) -> None:  # fmt: skip
        self._dset = dset
        (self._layout, self._chunk, self.chunk_options), self._filters = layout, filters
        self._fill, self._fill_type = fill, fill_type
        self._plist: Any = None

    def __getattr__(self, name: str) -> Any:  # anything not decoded: HDF5's own list
        if name.startswith("__"):
            raise AttributeError(name)
        if self._plist is None:
            self._plist = self._dset.id.get_create_plist()
        return getattr(self._plist, name)

    def get_layout(self) -> int:
        """The storage layout (``h5py.h5d.CHUNKED``, ...)."""
        return self._layout

    def get_chunk(self) -> tuple[int, ...]:
        """The chunk shape of a chunked dataset."""
        if self._chunk is None:
            return self.__getattr__("get_chunk")()  # HDF5 raises as for any non-chunked one
        return self._chunk

    def get_nfilters(self) -> int:
        """The number of filters in the pipeline."""
        return len(self._filters)

    def get_filter(self, index: int) -> tuple[int, int, tuple[int, ...], bytes]:
        """``(id, flags, cd_values, name)`` of filter ``index``, as h5py returns them."""
        if not 0 <= index < len(self._filters):
            return self.__getattr__("get_filter")(index)  # h5py's error for a bad index
        return self._filters[index]

    def get_external_count(self) -> int:
        """External segments: datasets with any are left to HDF5's list entirely."""
        return 0

    def get_fill_value(self, out: np.ndarray) -> None:
        """Fill ``out`` with the fill value, converted to ``out``'s type as HDF5 does."""
        known = self._fill_type
        if known is None or (out.dtype.kind, out.dtype.itemsize) != (known.kind, known.itemsize):
            self.__getattr__("get_fill_value")(out)
            return
        if self._fill is None:  # no value stored: HDF5's default, zero bytes
            out[...] = 0
            return
        out[...] = np.frombuffer(self._fill, dtype=self._fill_type)[0]


def creation_messages(dset: h5py.Dataset, addr: int, view: View, layout: Layout) -> NativeCreation:
    """The creation properties of ``dset``, whose object header is at file address ``addr``.

    Raises
    ------
    NotNative
        When any of them is not decoded here: read the dataset's property list from HDF5.
    """
    return decode_creation(dset, object_messages(addr, view, layout, CREATION_TYPES), layout)


def decode_creation(dset: h5py.Dataset, messages: list[tuple[int, int, bytes]],
                    layout: Layout) -> NativeCreation:  # fmt: skip
    """The creation properties of ``dset`` from the ``(type, flags, body)`` of its header's
    :data:`~._object_header.CREATION_TYPES` messages (all of them, in storage order).

    Raises
    ------
    NotNative
        As :func:`creation_messages`.
    """
    by_type: dict[int, bytes] = {}
    for mtype, mflags, body in messages:
        if mflags & 0x02:
            raise NotNative(f"shared message of type {mtype}")
        if mtype in by_type:
            raise NotNative(f"two messages of type {mtype}")
        by_type[mtype] = body
    if _EXTERNAL in by_type:
        raise NotNative("external storage")
    if _LAYOUT not in by_type or _DATATYPE not in by_type:
        raise NotNative("no layout or datatype message")
    try:
        storage = _layout(by_type[_LAYOUT], layout)
        filters = _pipeline(by_type[_PIPELINE]) if _PIPELINE in by_type else []
        fill, fill_type = _fill(by_type, by_type[_DATATYPE])
    except (IndexError, ValueError, struct.error) as exc:
        raise NotNative(str(exc)) from exc
    return NativeCreation(dset, storage, filters, fill, fill_type)


def _layout(body: bytes, layout: Layout) -> tuple[int, tuple[int, ...] | None, int | None]:
    """(layout class, chunk shape, chunk options) of a layout message."""
    version, cls = body[0], body[1]
    if version not in (3, 4, 5) or cls not in _LAYOUTS:
        raise NotNative(f"layout message version {version}, class {cls}")
    if cls != 2:
        return _LAYOUTS[cls], None, None
    options: int | None = 0
    if version == 3:  # rank + 1 dimensions of 4 bytes after the index address, the last
        ndims = body[2]  # being the element size
        at = 3 + layout.offset_size
        dims = [u(body, at + 4 * i, 4) for i in range(ndims)]
    else:  # flags, rank + 1, bytes per dimension, then the dimensions (version 5, of HDF5
        # 2.0, has version 4's fields: only how its chunk index sizes chunks differs)
        ndims, width = body[3], body[4]
        if body[2] & _DONT_FILTER_PARTIAL:  # HDF5 says which option bit that is
            options = None
        if not 1 <= width <= 8:
            raise NotNative(f"chunk dimensions of {width} bytes")
        dims = [u(body, 5 + width * i, width) for i in range(ndims)]
    if ndims < 2:
        raise NotNative("a chunked layout without dimensions")
    return h5py.h5d.CHUNKED, tuple(dims[:-1]), options


def _pipeline(body: bytes) -> list[tuple[int, int, tuple[int, ...], bytes]]:
    version, count = body[0], body[1]
    if version not in (1, 2):
        raise NotNative(f"filter pipeline message version {version}")
    pos = 8 if version == 1 else 2
    out = []
    for _ in range(count):
        if version == 1:
            fid, name_len, flags, ncd = _FILTER_V1.unpack_from(body, pos)
            pos += 8
            name = body[pos : pos + name_len].split(b"\0", 1)[0]
            pos += name_len  # padded to a multiple of 8 bytes in the length itself
        else:
            fid = u(body, pos, 2)
            name_len = u(body, pos + 2, 2) if fid >= 256 else 0
            pos += 4 if fid >= 256 else 2
            flags, ncd = u(body, pos, 2), u(body, pos + 2, 2)
            pos += 4
            name = body[pos : pos + name_len].split(b"\0", 1)[0]
            pos += name_len
        cd = tuple(u(body, pos + 4 * i, 4) for i in range(ncd))
        if len(cd) != ncd:
            raise NotNative("filter client values past the message")
        pos += 4 * ncd + (4 if version == 1 and ncd % 2 else 0)
        if not name:
            if fid not in _BUILTIN_NAMES:
                raise NotNative(f"unnamed filter {fid}")  # HDF5 looks its name up
            name = _BUILTIN_NAMES[fid]
        if ncd > _MAX_CD or len(name) > _MAX_NAME:
            raise NotNative(f"filter {fid} with {ncd} client values")
        out.append((fid, flags, cd, name))
    return out


def _fill(by_type: dict[int, bytes], datatype: bytes) -> tuple[bytes | None, np.dtype | None]:
    """(the fill value's stored bytes or ``None`` for HDF5's default zeros, their type); a type
    ``None`` (not a plain number): HDF5 converts it."""
    number = _number_type(datatype)
    body = by_type.get(_FILL)
    if body is None:
        if _OLD_FILL in by_type:
            raise NotNative("old fill value message only")
        return None, number
    version = body[0]
    if version in (1, 2):
        if not body[3]:  # "not defined" in these versions: left to HDF5's reading
            raise NotNative(f"fill value message version {version} without a value")
        size, at = u(body, 4, 4), 8
    elif version == 3:
        flags = body[1]
        if flags & 0x10:
            raise NotNative("undefined fill value")
        if not flags & 0x20:
            return None, number
        size, at = u(body, 2, 4), 6
    else:
        raise NotNative(f"fill value message version {version}")
    if number is None or size != number.itemsize or len(body) < at + size:
        return None, None
    return bytes(body[at : at + size]), number


def _number_type(datatype: bytes) -> np.dtype | None:
    """The numpy type of a plain little- or big-endian integer or IEEE float datatype
    message, ``None`` for any other."""
    cls, bits, size = datatype[0] & 0x0F, datatype[1], u(datatype, 4, 4)
    order = ">" if bits & 0x01 else "<"
    if cls == 0 and size in (1, 2, 4, 8):  # fixed-point; bit 3 = signed
        offset, precision = u(datatype, 8, 2), u(datatype, 10, 2)
        if offset or precision != 8 * size or bits & 0x06:  # padding bits: HDF5 converts
            return None
        return np.dtype(f"{order}{'i' if bits & 0x08 else 'u'}{size}")
    if cls == 1 and size in (4, 8) and datatype[1:3] == _IEEE_BITS[order][size]:
        if datatype[8:20] != _IEEE_FIELDS[size]:
            return None
        return np.dtype(f"{order}f{size}")
    return None


#: Class bit fields of IEEE floats (byte order; padding zero; mantissa normalised with an
#: implied bit; sign bit at the top) and their properties (bit offset, precision, exponent
#: location and size, mantissa location and size, exponent bias): anything else is converted
#: by HDF5.
_IEEE_BITS = {"<": {4: bytes([0x20, 31]), 8: bytes([0x20, 63])},
              ">": {4: bytes([0x21, 31]), 8: bytes([0x21, 63])}}  # fmt: skip
_IEEE_FIELDS = {4: struct.pack("<HHBBBBI", 0, 32, 23, 8, 0, 23, 127),
                8: struct.pack("<HHBBBBI", 0, 64, 52, 11, 0, 52, 1023)}  # fmt: skip
