"""Native chunk decoding: numcodecs straight into numpy outputs, many chunks per call.

zarr-python reads a selection as one coroutine per chunk, each decoded on its own and handed
between the event loop and a thread; for a granule of thousands of small chunks that overhead,
not the network, sets the speed.  This module decodes a whole batch of chunks of one or many
arrays at once:

* :class:`ChunkCodec` -- an array's codec chain (compressor, then filters in reverse), its dtype,
  chunk shape, memory order and the value unstored chunks read as, built from the same Zarr v2
  metadata the store serves (so both paths agree on every value);
* the selections they decode into: :mod:`h5sidecar.read.native._selection`.

HDF5's byte shuffle is undone with numpy (a transposing copy that releases the GIL) instead of
numcodecs' ``Shuffle``, which holds it: decoding then scales across cores, since zlib releases
the GIL too.

Arrays of variable-length UTF-8 strings (materialised by the indexer, ``vlen-utf8``) are
decoded here too when the caller asks (``strings=True``), to the dtype zarr reads them as
(numpy's ``StringDType``); other arrays of Python objects are not: :meth:`ChunkCodec.for_array`
returns ``None`` and callers read them through zarr.
"""

from __future__ import annotations

import math
import os
import threading
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec

from h5sidecar.errors import ChunkDecodeError, InvalidReferenceError
from h5sidecar.read._process_settings import process_settings

__all__ = [
    "ChunkCodec",
    "numcodec",
    "decode_executor",
    "decode_threads",
]

#: dtype kinds decoded natively: numbers, booleans, fixed-length bytes and plain structures.
_NATIVE_KINDS = frozenset("biufcSV")

#: the decode pool, made on first use (the gateway cancels its queued work on shutdown)
_EXECUTOR: ThreadPoolExecutor | None = None
#: (threads, pool): what :func:`decode_executor` compares with the settings
_SIZED_POOL: tuple[int, ThreadPoolExecutor] | None = None
_EXECUTOR_LOCK = threading.Lock()

try:  # libdeflate (a dependency through imagecodecs); plain zlib if it is missing
    from imagecodecs import deflate_decode as _deflate_decode
except ImportError:  # pragma: no cover - imagecodecs is a dependency
    _deflate_decode = None  # type: ignore[assignment]


def decode_threads() -> int:
    """Threads of the decode pool: ``ReadSettings.decode_threads`` of the process-wide settings
    (``H5SIDECAR_DECODE_THREADS``, or :func:`h5sidecar.read.configure`), 0 meaning one per
    CPU, at least 2."""
    return process_settings().decode_threads or max(os.cpu_count() or 2, 2)


def decode_executor() -> ThreadPoolExecutor:
    """The process-wide pool chunks are decoded in, of :func:`decode_threads` threads.

    When :func:`h5sidecar.read.configure` changed the size since the pool was made, a new pool
    replaces it; work already given to the old one still finishes there.
    """
    global _EXECUTOR, _SIZED_POOL
    n = decode_threads()
    current = _SIZED_POOL  # one read: size and pool always match
    if current is not None and current[0] == n:
        return current[1]
    with _EXECUTOR_LOCK:
        current = _SIZED_POOL
        if current is None or current[0] != n:
            pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="h5sidecar-decode")
            # the old pool is not shut down (a reader may be about to submit to it): it
            # finishes what it was given, and its threads end once nothing refers to it
            current = (n, pool)
            _SIZED_POOL, _EXECUTOR = current, pool
        return current[1]


def drop_queued_decodes() -> None:
    """Cancel the decode jobs still queued in the process-wide pool, if one was made (a server
    shutting down: the requests they belong to are answered or cut)."""
    pool = _EXECUTOR
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


class _Unshuffle(Codec):  # type: ignore[misc]
    """HDF5 byte shuffle, undone by a numpy transpose (releases the GIL; leftover bytes kept)."""

    codec_id = "h5sidecar.unshuffle"

    def __init__(self, elementsize: int) -> None:
        self.elementsize = int(elementsize)

    def encode(self, buf: Any) -> Any:  # pragma: no cover - decode-only helper
        raise NotImplementedError("decode only")

    def decode(self, buf: Any, out: Any = None) -> Any:
        raw = np.frombuffer(buf, dtype=np.uint8)
        size = self.elementsize
        res = np.empty(raw.size, dtype=np.uint8) if out is None else out
        if res.size != raw.size:
            raise ValueError(f"unshuffle: {raw.size} bytes into a buffer of {res.size}")
        if size <= 1:
            res[...] = raw
            return res
        n = raw.size // size
        res[: n * size].reshape(n, size)[...] = raw[: n * size].reshape(size, n).T
        res[n * size :] = raw[n * size :]  # as HDF5: trailing bytes are not shuffled
        return res


class _Inflate(Codec):  # type: ignore[misc]
    """zlib streams (HDF5 deflate) inflated by libdeflate (imagecodecs) straight into a buffer:
    ~1.7x faster than zlib here, no intermediate copy, GIL released."""

    codec_id = "h5sidecar.inflate"

    def encode(self, buf: Any) -> Any:  # pragma: no cover - decode-only helper
        raise NotImplementedError("decode only")

    def decode(self, buf: Any, out: Any = None) -> Any:
        if out is None:  # the size is unknown here: let zlib grow its buffer
            return zlib.decompress(buf)
        return _deflate_decode(buf, out=out)


def _codec(config: Mapping[str, Any]) -> Codec:
    if config.get("id") == "shuffle":
        return _Unshuffle(int(config.get("elementsize", 4)))
    if config.get("id") == "zlib" and _deflate_decode is not None:
        return _Inflate()
    return numcodec(config)


def numcodec(config: Mapping[str, Any]) -> Codec:
    """numcodecs' codec of ``config``.

    Raises
    ------
    InvalidReferenceError
        When numcodecs knows no such codec, or not with these parameters (numcodecs raises
        its own ``UnknownCodecError``, a ``TypeError`` or a ``ValueError``).
    """
    try:
        return numcodecs.get_codec(dict(config))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidReferenceError(
            f"codec {dict(config)!r} is not one numcodecs can build ({exc}): the sidecar is "
            "corrupt, or the codec comes with a package to install"
        ) from exc


_NON_FINITE = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}


def _fill(zarray: Mapping[str, Any], dtype: np.dtype) -> Any:
    """The value unstored chunks read as: numbers (and zarr's ``"NaN"``/``"Infinity"``) are
    parsed here, anything else (base64 bytes of strings and structures) exactly as zarr parses
    the ``.zarray``."""
    value = zarray.get("fill_value")
    if value is None:
        return np.zeros((), dtype=dtype)[()]
    if dtype.kind in "biuf" and isinstance(value, bool | int | float | str):
        number = _NON_FINITE.get(value, value) if isinstance(value, str) else value
        if not isinstance(number, str):
            with np.errstate(invalid="ignore", over="ignore"):
                return np.asarray(number).astype(dtype)[()]
    from h5sidecar._compat.zarr import v2_fill_value

    fill = v2_fill_value(zarray)
    if fill is None:
        return np.zeros((), dtype=dtype)[()]
    # a scalar, as above: a 0-d array would be taken for a decoded chunk and indexed
    return (np.asarray(fill).astype(dtype) if dtype.fields is None else np.asarray(fill, dtype))[()]


@dataclass(frozen=True, slots=True, eq=False)
class ChunkCodec:
    """How to turn one stored chunk of an array into numbers.

    Attributes
    ----------
    dtype : numpy.dtype
        Decoded dtype (byte order as stored, as zarr returns it).
    chunks : tuple of int
        Chunk shape (edge chunks are stored whole, as in HDF5 and Zarr v2).
    order : "C" or "F"
    codecs : tuple of numcodecs.abc.Codec
        In decode order: the compressor first, then the filters from last to first.
    fill : Any
        What unstored chunks read as.
    """

    dtype: np.dtype
    chunks: tuple[int, ...]
    order: str
    codecs: tuple[Codec, ...]
    fill: Any
    #: the values are variable-length strings: decoded apart and copied, never in place
    strings: bool = False
    #: bytes of one decoded (whole) chunk; computed once: a batch asks for it per chunk
    chunk_nbytes: int = field(init=False, repr=False)
    #: the codec chain :meth:`decode_into` runs without the general loop of :meth:`_raw`
    _chain: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "chunk_nbytes", math.prod(self.chunks) * self.dtype.itemsize)
        kinds = tuple(type(c) for c in self.codecs)
        chain = {(): "plain", (_Inflate,): "inflate",
                 (_Inflate, _Unshuffle): "inflate+unshuffle"}.get(kinds, "other")  # type: ignore[arg-type]
        object.__setattr__(self, "_chain", chain)

    @classmethod
    def for_array(cls, zarray: Mapping[str, Any], dtype: np.dtype, *,
                  strings: bool = False) -> ChunkCodec | None:
        """The codec of an array from its ``.zarray`` document, or None when its values are
        Python objects (read those through zarr).  With ``strings``, an array of
        variable-length UTF-8 strings gets a codec too (:attr:`strings`; its dtype is the one
        zarr reads it as).

        Raises
        ------
        InvalidReferenceError
            When numcodecs cannot build a codec (unknown, or not installed).
        """
        configs = [zarray["compressor"]] if zarray.get("compressor") else []
        configs += list(reversed(zarray.get("filters") or []))
        chunks = tuple(int(c) for c in zarray["chunks"])
        order = str(zarray.get("order", "C"))
        if dtype == np.dtype(object) and strings and configs and configs[-1].get("id") == "vlen-utf8":
            from h5sidecar._compat.zarr import v2_string_dtype

            as_zarr = v2_string_dtype(zarray)
            if as_zarr is None:
                return None
            return cls(dtype=as_zarr[0], chunks=chunks, order=order,
                       codecs=tuple(_codec(c) for c in configs), fill=as_zarr[1], strings=True)
        if dtype.kind not in _NATIVE_KINDS or dtype.hasobject:
            return None
        return cls(dtype=dtype, chunks=chunks, order=order,
                   codecs=tuple(_codec(c) for c in configs), fill=_fill(zarray, dtype))

    @property
    def chunk_items(self) -> int:
        """Elements in one (whole) chunk."""
        return math.prod(self.chunks)

    def decode(self, data: Any, where: str = "", dest: np.ndarray | None = None) -> np.ndarray:
        """Decode one stored chunk to an array of shape ``chunks``.

        With ``dest`` (a writable, contiguous ``uint8`` array of :attr:`chunk_nbytes`), the
        last stage writes straight into it (inflate and unshuffle can; others are copied) and
        the result is a view of ``dest``.

        Raises
        ------
        ChunkDecodeError
            When a codec fails or the decoded size is not one chunk's (a corrupt chunk or a
            reference pointing at the wrong bytes).
        """
        if self.strings:
            return self._strings(data, where)
        raw = self._raw(data, where, dest)
        return raw.view(self.dtype).reshape(self.chunks, order=self.order)  # type: ignore[call-overload]

    def _strings(self, data: Any, where: str) -> np.ndarray:
        """A chunk of variable-length strings: the byte stages, then ``vlen-utf8``."""
        buf = data
        try:
            for codec in self.codecs:
                buf = codec.decode(buf)
            values = np.asarray(buf, dtype=object).reshape(-1)
        except Exception as exc:  # codecs raise anything from zlib.error to RuntimeError
            raise ChunkDecodeError(
                f"chunk {where} did not decode ({type(exc).__name__}: {exc}); the source "
                "bytes are not what the sidecar describes: re-index the granule"
            ) from exc
        if values.size != self.chunk_items:
            raise ChunkDecodeError(
                f"chunk {where} decoded to {values.size} strings, expected {self.chunk_items} "
                f"({self.chunks}); re-index the granule"
            )
        return values.reshape(self.chunks, order=self.order)  # type: ignore[call-overload]

    def decode_into(self, data: Any, dest: np.ndarray) -> None:
        """:meth:`decode` into ``dest`` (as there), for a batch that decodes thousands of
        chunks: no array of the chunk's shape and no name of the chunk are made (call
        :meth:`decode` again for an error that names it).

        Raises
        ------
        ChunkDecodeError
            As :meth:`decode`.
        """
        chain = self._chain
        if chain == "plain" and len(data) == dest.size:  # plain bytes: one copy, no checks left
            dest[...] = np.frombuffer(data, np.uint8)
            return
        # the chains of nearly every HDF5 chunk, without the general loop's per-stage checks
        # (a few microseconds a chunk, which thousands of small chunks add up to): libdeflate
        # fills exactly the chunk's bytes (returning ``out`` itself) or raises; a chunk it does
        # not fill is decoded again by the general loop, which reports what is wrong with it
        try:
            if chain == "inflate":
                if _deflate_decode(data, out=dest) is dest:  # type: ignore[arg-type]
                    return
            elif chain == "inflate+unshuffle":
                shuffled = np.empty(dest.size, np.uint8)
                if _deflate_decode(data, out=shuffled) is shuffled:  # type: ignore[arg-type]
                    self.codecs[1].decode(shuffled, out=dest)
                    return
        except (RuntimeError, ValueError):  # imagecodecs' DeflateError is a RuntimeError
            pass
        self._raw(data, "", dest)

    def _raw(self, data: Any, where: str, dest: np.ndarray | None) -> np.ndarray:
        """The chunk's decoded bytes (``uint8``; in ``dest`` when given)."""
        need = self.chunk_nbytes
        buf = data
        try:
            last = len(self.codecs) - 1
            for i, codec in enumerate(self.codecs):
                if isinstance(codec, _Inflate | _Unshuffle):
                    target = dest if i == last else None
                    if target is None and isinstance(codec, _Inflate):
                        # the expected size is known: libdeflate into a buffer of it (what a
                        # following shuffle keeps, or an edge chunk placed by a copy) instead
                        # of zlib growing one
                        target = np.empty(need, np.uint8)
                    buf = _sized(codec, buf, target)
                else:
                    buf = codec.decode(buf)
        except Exception as exc:  # codecs raise anything from zlib.error to RuntimeError
            raise ChunkDecodeError(
                f"chunk {where} did not decode ({type(exc).__name__}: {exc}); the source "
                "bytes are not what the sidecar describes: re-index the granule"
            ) from exc
        flat = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
        raw = flat.reshape(-1).view(np.uint8)
        if raw.size != need:
            raise ChunkDecodeError(
                f"chunk {where} decoded to {raw.size} bytes, expected {need} "
                f"({self.chunks} x {self.dtype}); re-index the granule"
            )
        if dest is not None and raw.ctypes.data != dest.ctypes.data:
            dest[...] = raw  # the last stage could not write in place
            raw = dest
        return raw


def _sized(codec: Codec, buf: Any, target: np.ndarray | None) -> Any:
    """Run a stage that can write into ``target``; an inflate whose output does not fit the
    expected size (a size-changing filter follows) falls back to a growing buffer."""
    if target is None:
        return codec.decode(buf)
    try:
        return codec.decode(buf, out=target)
    except Exception:
        if not isinstance(codec, _Inflate):
            raise
        return zlib.decompress(buf)  # raises zlib.error itself when the stream is bad
