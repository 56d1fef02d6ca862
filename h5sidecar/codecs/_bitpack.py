"""numcodecs codecs for HDF5's built-in bit-packing filters: N-bit (5) and scale-offset (6).

Both filters write a stream of fixed-width bit fields, most significant bit first, with no
padding between elements.  No standard codec reads them, so they are implemented here in
vectorised numpy, following the HDF5 library's ``H5Znbit.c`` / ``H5Zscaleoffset.c`` bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_ndarray_like

__all__ = [
    "HDF5Nbit",
    "HDF5ScaleOffset",
    "NbitCustomFloatError",
    "nbit_fields",
    "pack_fields",
    "unpack_fields",
]

_U8 = np.dtype(">u8")


def _as_u8(buf: Any) -> np.ndarray:
    return np.ascontiguousarray(ensure_ndarray_like(buf)).reshape(-1).view(np.uint8)


def unpack_fields(
    stream: np.ndarray, widths: Sequence[int], nrec: int, raw: Sequence[bool] = ()
) -> list[np.ndarray]:
    """Split an MSB-first bit stream into ``nrec`` records of fields with the given bit widths.

    Fields come back as ``uint64[nrec]``, or as ``uint8[nrec, width // 8]`` (the bytes in
    stream order) where ``raw`` is true or the field is wider than 64 bits.
    """
    raw = list(raw) or [False] * len(widths)
    rec_bits = int(sum(widths))
    need = nrec * rec_bits
    if need == 0:
        return [np.zeros(nrec, np.uint64) for _ in widths]
    if stream.size * 8 < need:
        raise ValueError(
            f"bit-packed chunk is truncated: {stream.size} bytes hold fewer than the "
            f"{nrec} x {rec_bits} bits its filter parameters describe"
        )
    padded = np.concatenate([stream[: (need + 7) // 8], np.zeros(9, np.uint8)])
    starts = np.arange(nrec, dtype=np.int64) * rec_bits
    out, col = [], 0
    for w, as_bytes in zip(widths, raw, strict=True):
        if as_bytes or w > 64:
            out.append(_field_bytes(padded, starts + col, w))
        else:
            out.append(_field_uint(padded, starts + col, w))
        col += w
    return out


def _field_uint(padded: np.ndarray, bitpos: np.ndarray, w: int) -> np.ndarray:
    """The ``w``-bit (w <= 64) big-endian fields starting at each bit position.

    Gathers the 9 bytes covering each field (a 64-bit window plus one byte for the bit shift)
    instead of expanding the stream to one byte per bit.
    """
    byte, shift = bitpos // 8, (bitpos % 8).astype(np.uint64)
    hi = np.lib.stride_tricks.sliding_window_view(padded, 8)[byte].view(_U8).reshape(-1)
    hi = hi.astype(np.uint64)
    lo = padded[byte + 8].astype(np.uint64)
    # (hi << shift) | (lo >> (8 - shift)) holds the 64 bits starting at the field's first bit
    top = (hi << shift) | (lo >> (np.uint64(8) - shift))
    return top >> np.uint64(64 - w)


def _field_bytes(padded: np.ndarray, bitpos: np.ndarray, w: int) -> np.ndarray:
    """Fields of whole bytes (``w % 8 == 0``) at arbitrary bit positions, as uint8 rows."""
    nbytes = w // 8
    cols = [_field_uint(padded, bitpos + 8 * k, 8) for k in range(nbytes)]
    return np.stack(cols, axis=1).astype(np.uint8)


def pack_fields(fields: Sequence[np.ndarray], widths: Sequence[int]) -> bytes:
    """Inverse of :func:`unpack_fields`: the MSB-first stream, zero-padded to a whole byte.

    2-d ``uint8`` fields are taken as bytes in stream order; 1-d ones as integers.
    """
    cols = []
    for f, w in zip(fields, widths, strict=True):
        arr = np.asarray(f)
        if arr.ndim == 2:
            cols.append(np.unpackbits(arr.astype(np.uint8), axis=1)[:, :w])
        else:
            raw = arr.astype(np.uint64).astype(_U8).view(np.uint8).reshape(-1, 8)
            cols.append(np.unpackbits(raw, axis=1)[:, 64 - w :])
    return np.packbits(np.concatenate(cols, axis=1).reshape(-1)).tobytes()


def _store(out: np.ndarray, value: np.ndarray, byte_offset: int, size: int, order: str) -> None:
    """Write ``value`` (uint64) as ``size``-byte integers at ``byte_offset`` of each record."""
    raw = value.astype(np.dtype(order + "u8")).view(np.uint8).reshape(-1, 8)
    out[:, byte_offset : byte_offset + size] = raw[:, :size] if order == "<" else raw[:, 8 - size :]


def _load(rec: np.ndarray, byte_offset: int, size: int, order: str) -> np.ndarray:
    """Read ``size``-byte integers at ``byte_offset`` of each record as uint64."""
    raw = np.zeros((rec.shape[0], 8), np.uint8)
    part = rec[:, byte_offset : byte_offset + size]
    if order == "<":
        raw[:, :size] = part
    else:
        raw[:, 8 - size :] = part
    return raw.view(np.dtype(order + "u8")).reshape(-1).astype(np.uint64)


class HDF5Nbit(Codec):
    """HDF5 N-bit filter (id 5): each element's significant bits, packed back to back.

    The layout comes from the filter's ``cd_values`` (flattened by
    :func:`h5sidecar.indexer.filters` into ``fields``).  Decoding yields the *values* h5py
    gives: integer fields of reduced precision are shifted down and, when signed, sign-extended
    (HDF5 does that in its type conversion, which Zarr has no other place for).

    Parameters
    ----------
    itemsize : int
        Bytes per element.
    nelements : int
        Elements per chunk (the filter always packs whole chunks).
    fields : list of [byte_offset, size, order, precision, offset, kind]
        One entry per packed field in stream order; ``order`` is ``"<"`` or ``">"``, ``kind``
        ``"i"`` (signed, sign-extended), ``"u"`` (taken as is) or ``"raw"`` (copied bytes).
    """

    codec_id = "h5sidecar.nbit"

    def __init__(self, itemsize: int, nelements: int, fields: Sequence[Sequence[Any]]) -> None:
        self.itemsize = int(itemsize)
        self.nelements = int(nelements)
        self.fields = [list(f) for f in fields]

    def _widths(self) -> list[int]:
        return [f[1] * 8 if f[5] == "raw" else f[3] for f in self.fields]

    def decode(self, buf: Any, out: Any = None) -> Any:
        """Unpack a chunk."""
        raw = [f[5] == "raw" for f in self.fields]
        values = unpack_fields(_as_u8(buf), self._widths(), self.nelements, raw)
        rec = np.zeros((self.nelements, self.itemsize), np.uint8)
        for (boff, size, order, prec, _off, kind), v in zip(self.fields, values, strict=True):
            if kind == "raw":
                rec[:, boff : boff + size] = v
                continue
            if kind == "i" and 0 < prec < 64:
                # two's complement sign extension from the field's top bit
                neg = (v >> np.uint64(prec - 1)) & np.uint64(1)
                v = np.where(neg == 1, v | ~np.uint64((1 << prec) - 1), v)
            _store(rec, v, boff, size, order)
        return _into(rec.reshape(-1), out)

    def encode(self, buf: Any) -> bytes:
        """Pack a chunk (inverse of :meth:`decode`)."""
        rec = _as_u8(buf).reshape(self.nelements, self.itemsize)
        values = []
        for boff, size, order, prec, _off, kind in self.fields:
            if kind == "raw":
                values.append(rec[:, boff : boff + size])
            else:
                mask = np.uint64((1 << prec) - 1) if prec < 64 else np.uint64(2**64 - 1)
                values.append(_load(rec, boff, size, order) & mask)
        return pack_fields(values, self._widths())


class HDF5ScaleOffset(Codec):
    """HDF5 scale-offset filter (id 6) for integer and floating-point (D-scale) data.

    Parameters
    ----------
    dtype : str
        numpy dtype of the dataset (byte order included).
    cd_values : list of int
        The filter's 20 client values, as stored in the file (scale type, scale factor,
        elements per chunk, class, size, sign, order, fill-value flag, fill value words).
    """

    codec_id = "h5sidecar.scaleoffset"
    _HEADER = 21  # 4 bytes minbits, 1 byte size of minval, minval (padded)

    def __init__(self, dtype: str, cd_values: Sequence[int]) -> None:
        self.dtype = str(dtype)
        self.cd_values = [int(v) for v in cd_values]

    # cd_values accessors (names from H5Zscaleoffset.c)
    def _parms(self) -> tuple[int, int, int, int, bool]:
        """Scale factor (signed), elements per chunk, class (0 int, 1 float), size, fill flag."""
        cd = self.cd_values
        scale_factor = cd[1] - (1 << 32) if cd[1] >= 1 << 31 else cd[1]
        return scale_factor, cd[2], cd[3], cd[4], bool(cd[7])

    def _fill_bytes(self, size: int) -> bytes:
        # stored least significant byte first, four bytes per cd value
        return np.asarray(self.cd_values[8:], "<u4").tobytes()[:size]

    def decode(self, buf: Any, out: Any = None) -> Any:
        """Undo the scale-offset transform of one chunk."""
        factor, n, cls, size, filavail = self._parms()
        target = np.dtype(self.dtype)
        native = target.newbyteorder("<")
        if cls == 0 and max(factor, 0) == size * 8:
            return _into(_as_u8(buf), out)  # the filter left this dataset untouched
        raw = _as_u8(buf)
        minbits = int(raw[:4].view("<u4")[0])
        mv_size = min(8, int(raw[4]))
        minval = int.from_bytes(raw[5 : 5 + mv_size].tobytes(), "little")
        body = raw[self._HEADER :]
        if minbits == size * 8:
            vals = body[: n * size].view(native)
            return _into(vals.astype(target).view(np.uint8), out)
        if minbits:
            field = unpack_fields(body, [minbits], n)[0]
        else:
            field = np.zeros(n, np.uint64)
        fill_code = np.uint64((1 << minbits) - 1)
        if cls == 0:
            wrap = np.uint64((1 << (8 * size)) - 1) if size < 8 else np.uint64(2**64 - 1)
            ivals = ((field + np.uint64(minval)) & wrap).astype(f"<u{size}").view(native)
            if filavail:
                fill = np.frombuffer(self._fill_bytes(size), native)[0]
                ivals = np.where(field == fill_code, fill, ivals).astype(native)
            return _into(ivals.astype(target).view(np.uint8), out)
        fvals = _dscale_values(field, minbits, minval, factor, native, size)
        if filavail:
            fill = np.frombuffer(self._fill_bytes(size), native)[0]
            fvals = np.where(field == fill_code, fill, fvals).astype(native)
        return _into(fvals.astype(target).view(np.uint8), out)

    def encode(self, buf: Any) -> bytes:
        """Encode losslessly at full precision (``minbits`` = the type's width).

        HDF5 decodes this form as a plain copy, so re-encoding values read through h5py (e.g.
        a chunk the indexer materialises) round-trips exactly.
        """
        _, n, _, size, _ = self._parms()
        values = (
            _as_u8(buf).view(np.dtype(self.dtype)).astype(np.dtype(self.dtype).newbyteorder("<"))
        )
        header = (size * 8).to_bytes(4, "little") + bytes([8]) + bytes(16)
        return header + values.tobytes()[: n * size]


def _dscale_values(
    field: np.ndarray, minbits: int, minval: int, factor: int, native: np.dtype, size: int
) -> np.ndarray:
    """Floating-point D-scale: ``value = int(field) / 10**D + min``, in the type's precision."""
    itype = np.dtype(f"<i{size}")
    ivals = field.astype(np.dtype(f"<u{size}")).view(itype)
    fmin = np.frombuffer(minval.to_bytes(8, "little")[:size], native)[0]
    # the C code computes powf/pow(10, D) and divides in float/double: so do we
    ten = native.type(10.0) ** native.type(factor)
    return (ivals.astype(native) / ten + fmin).astype(native)


# -- N-bit parameters ---------------------------------------------------------------------------
# cd_values: [n, need_not_compress, nelements, class, ...]; class 1 atomic [size, order,
# precision, offset], 2 array [total size, base class, base...], 3 compound [size, nmembers,
# then per member: offset, class, member...], 4 no-op [size] (bytes copied bit-packed as is).
_ATOMIC, _ARRAY, _COMPOUND, _NOOP = 1, 2, 3, 4


class NbitCustomFloatError(ValueError):
    """N-bit packing of a floating-point type of reduced precision (a non-IEEE "custom" float)."""


def nbit_fields(cd_values: Sequence[int], h5type: Any) -> tuple[int, list[list[Any]]]:
    """Flatten the N-bit parameter tree into ``(itemsize, fields)`` for :class:`HDF5Nbit`.

    Parameters
    ----------
    cd_values : sequence of int
        The filter's local parameters.
    h5type : h5py.h5t.TypeID
        The dataset's file datatype, walked in step with the parameters to learn which integer
        fields are signed and to refuse reduced-precision floats.

    Raises
    ------
    NbitCustomFloatError
        For a float field of reduced precision (its values need a float conversion).
    """
    cd = [int(v) for v in cd_values]
    fields: list[list[Any]] = []
    cls, size = cd[3], cd[4]
    if cls == _ATOMIC:
        _atomic(fields, 0, cd[4:8], h5type)
    elif cls == _ARRAY:
        _array(fields, cd, 4, 0, h5type)
    elif cls == _COMPOUND:
        _compound(fields, cd, 4, 0, h5type)
    else:
        fields.append([0, size, "<", size * 8, 0, "raw"])
    return size, fields


def _atomic(fields: list[list[Any]], base: int, parms: Sequence[int], h5type: Any) -> None:
    import h5py

    size, order, prec, off = parms
    full = prec == size * 8 and off == 0
    if isinstance(h5type, h5py.h5t.TypeFloatID) and not full:
        raise NbitCustomFloatError(
            f"nbit packs a {size}-byte float with {prec} significant bits at offset {off}: "
            "a non-IEEE float whose values need a conversion Zarr cannot express"
        )
    signed = isinstance(h5type, h5py.h5t.TypeIntegerID) and h5type.get_sign() == h5py.h5t.SGN_2
    kind = "i" if signed and not full else "u"
    fields.append([base, size, ">" if order else "<", prec, off, kind])


def _array(fields: list[list[Any]], cd: list[int], i: int, base: int, h5type: Any) -> int:
    total, bcls = cd[i], cd[i + 1]
    i += 2
    sup = h5type.get_super()
    if bcls == _ATOMIC:
        size = cd[i]
        for k in range(total // size):
            _atomic(fields, base + k * size, cd[i : i + 4], sup)
        return i + 4
    if bcls == _NOOP:
        fields.append([base, total, "<", total * 8, 0, "raw"])
        return i + 1
    walk = _array if bcls == _ARRAY else _compound
    end = i
    for k in range(total // cd[i]):
        end = walk(fields, cd, i, base + k * cd[i], sup)
    return end


def _compound(fields: list[list[Any]], cd: list[int], i: int, base: int, h5type: Any) -> int:
    nmembers = cd[i + 1]
    i += 2
    for m in range(nmembers):
        moff, mcls = cd[i], cd[i + 1]
        i += 2
        mtype = h5type.get_member_type(m)
        if mcls == _ATOMIC:
            _atomic(fields, base + moff, cd[i : i + 4], mtype)
            i += 4
        elif mcls == _NOOP:
            fields.append([base + moff, cd[i], "<", cd[i] * 8, 0, "raw"])
            i += 1
        elif mcls == _ARRAY:
            i = _array(fields, cd, i, base + moff, mtype)
        else:
            i = _compound(fields, cd, i, base + moff, mtype)
    return i


def _into(flat: np.ndarray, out: Any) -> Any:
    if out is None:
        return flat
    dst = _as_u8(out)
    dst[: flat.size] = flat.view(np.uint8)
    return out
