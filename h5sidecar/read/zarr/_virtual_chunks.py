"""Virtual re-chunking: smaller chunks of a plain (uncompressed) array, each a few byte runs of
one stored chunk.

A stored chunk without compressor or filters is its values' bytes in C order (see
:mod:`h5sidecar.read.native._subchunk`), so any box inside it is a set of contiguous byte runs.  A
*virtual chunk grid* whose chunk shape divides the stored chunk shape (along every axis that has
more than one stored chunk) puts every virtual chunk inside exactly one stored chunk; its bytes
are then the runs of that box, laid end to end.  A Zarr client reading through such a view
moves only the virtual chunks a selection touches.

The functions here are pure geometry (no I/O, no HTTP): :func:`plain_array` says which arrays
qualify, :func:`virtual_chunk_shape` chooses the virtual chunk shape for a
:class:`RechunkSpec`, :func:`virtual_runs` lists the byte runs of one virtual chunk.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import ArrayMeta

__all__ = [
    "MAX_RUNS",
    "RechunkSpec",
    "VirtualRuns",
    "plain_array",
    "virtual_chunk_shape",
    "virtual_runs",
]

#: Most byte runs a virtual chunk may need: a shape that would need more is widened along its
#: innermost cut axis until it does not (so one virtual chunk is at most this many ranges).
MAX_RUNS = 64
#: Bounds of a target size in bytes.
MIN_TARGET, MAX_TARGET = 256, 2**30
#: Candidates tried when looking for a divisor of a stored chunk length (bounded work).
_SEARCH = 4096
#: Kinds of fixed-size numpy types whose bytes are the values (no pointers, no structure).
_PLAIN_KINDS = "biufcSUmM"

_BYTES = re.compile(r"^([0-9]{1,10})([km]?)$")
_SHAPE = re.compile(r"^[0-9]{1,10}(x[0-9]{1,10}){0,31}$")


@dataclass(frozen=True, slots=True)
class RechunkSpec:
    """How to choose virtual chunk shapes.

    Attributes
    ----------
    target_bytes : int
        Virtual chunks of at most this many bytes (when ``shape`` is empty): the trailing axes
        are kept whole as far as they fit, so each virtual chunk is one byte run.
    shape : tuple of int
        An explicit virtual chunk shape, for arrays of that rank only (others keep their
        chunks); ``0`` keeps an axis' stored extent.  Each axis is rounded down to a divisor
        of the stored chunk.
    """

    target_bytes: int = 0
    shape: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: str, default_bytes: int) -> RechunkSpec:
        """``"auto"`` (``default_bytes``), ``"65536"``/``"64k"``/``"1m"`` (bytes) or
        ``"1x0"`` (a shape).

        Raises
        ------
        ValueError
            ``text`` is none of these, or the size lies outside 256 B .. 1 GiB.
        """
        if text == "auto":
            return cls._bytes(default_bytes, text)
        m = _BYTES.match(text)
        if m:
            return cls._bytes(int(m.group(1)) * {"": 1, "k": 2**10, "m": 2**20}[m.group(2)], text)
        if _SHAPE.match(text):
            return cls(shape=tuple(int(p) for p in text.split("x")))
        raise ValueError(
            f"re-chunk spec {text!r} is neither 'auto', a size in bytes ('65536', '64k', '1m') "
            "nor a chunk shape ('1x0', '24x100'; 0 keeps an axis whole)"
        )

    @classmethod
    def _bytes(cls, n: int, text: str) -> RechunkSpec:
        if not MIN_TARGET <= n <= MAX_TARGET:
            raise ValueError(f"re-chunk size {text!r} = {n} bytes lies outside 256 B .. 1 GiB")
        return cls(target_bytes=n)

    @property
    def name(self) -> str:
        """Canonical spelling (for view names, ETags and cache keys)."""
        return "x".join(map(str, self.shape)) if self.shape else str(self.target_bytes)


def plain_array(meta: ArrayMeta) -> bool:
    """True when the array's stored chunks are its values' plain C-order bytes: no compressor,
    no filters, C order, a fixed-size numeric/bytes/text type (any byte order), rank >= 1.

    Such an array qualifies for a virtual re-chunk view; others keep their stored chunks.
    """
    if meta.compressor is not None or meta.filters or meta.order != "C" or not meta.shape:
        return False
    if not isinstance(meta.dtype, str):
        return False  # structured types: zarr's v3 support of them is partial
    try:
        dt = np.dtype(meta.dtype)
    except TypeError:
        return False
    return dt.kind in _PLAIN_KINDS and dt.itemsize > 0 and not dt.hasobject


def _fit(want: int, chunk: int, single: bool) -> int:
    """Largest length <= ``want`` allowed along an axis with stored chunk length ``chunk``:
    any length when the axis has a single stored chunk (the virtual chunks past it are padding
    outside the array), else a divisor of ``chunk``.

    The divisor is searched in bounded time (sidecars are untrusted, chunk lengths may be
    huge): among the :data:`_SEARCH` lengths at and below ``want``, and among ``chunk // k``
    for ``k`` up to :data:`_SEARCH`; 1 when neither holds one.
    """
    want = max(1, min(want, chunk))
    if single or chunk % want == 0:
        return want
    best = 1
    for d in range(want, max(want - _SEARCH, 1), -1):
        if chunk % d == 0:
            best = d
            break
    for k in range(max(2, -(-chunk // want)), min(_SEARCH, chunk) + 1):
        if chunk % k == 0:
            return max(best, chunk // k)  # the smallest such k gives the largest divisor
    return best


def _runs_of(vchunks: Sequence[int], chunks: Sequence[int]) -> tuple[int, int]:
    """``(k, runs)``: the innermost axis a virtual chunk cuts (every later axis is whole), and
    runs per interior virtual chunk."""
    k = len(chunks) - 1
    while k > 0 and vchunks[k] == chunks[k]:
        k -= 1
    return k, math.prod(vchunks[:k])


def virtual_chunk_shape(meta: ArrayMeta, spec: RechunkSpec) -> tuple[int, ...]:
    """The virtual chunk shape of an array for ``spec`` (its stored chunk shape when it does not
    :func:`plain_array` or ``spec`` does not apply to it).

    A size target keeps trailing axes whole while the chunk fits and cuts the leading axes
    first, so every virtual chunk is a single byte run.  An explicit shape is rounded down to
    divisors of the stored chunk, then widened until a virtual chunk needs at most
    :data:`MAX_RUNS` runs.
    """
    chunks = meta.chunks
    if not plain_array(meta) or (spec.shape and len(spec.shape) != len(chunks)):
        return chunks
    single = [c >= n for c, n in zip(chunks, meta.shape, strict=True)]
    item = np.dtype(str(meta.dtype)).itemsize
    if spec.shape:
        v = [_fit(d or c, c, s) for d, c, s in zip(spec.shape, chunks, single, strict=True)]
        k, runs = _runs_of(v, chunks)
        while runs > MAX_RUNS:
            v[k] = chunks[k]
            k, runs = _runs_of(v, chunks)
        return tuple(v)
    v = list(chunks)
    for j in range(len(v)):
        inner = math.prod(v[j + 1 :]) * item
        if v[j] * inner <= spec.target_bytes:
            break
        v[j] = _fit(spec.target_bytes // inner, chunks[j], single[j])
        if inner <= spec.target_bytes:
            break
    return tuple(v)


@dataclass(frozen=True, slots=True)
class VirtualRuns:
    """Where the bytes of one virtual chunk lie in its stored chunk.

    Attributes
    ----------
    source : tuple of int
        Index of the stored chunk holding it.
    src, dst : numpy.ndarray
        int64 byte offsets of each run in the stored chunk and in the virtual chunk.
    lengths : numpy.ndarray
        int64 bytes of each run (runs adjacent in both are merged).
    nbytes : int
        Size of the virtual chunk; bytes no run covers are padding past the stored chunk (outside
        the array) and read as zeros.
    """

    source: tuple[int, ...]
    src: np.ndarray
    dst: np.ndarray
    lengths: np.ndarray
    nbytes: int


def virtual_runs(
    shape: Sequence[int],
    chunks: Sequence[int],
    vchunks: Sequence[int],
    vindex: Sequence[int],
    itemsize: int,
) -> VirtualRuns:
    """The runs of virtual chunk ``vindex`` (grid of ``vchunks``) of an array of ``shape`` in
    its stored chunk (grid of ``chunks``); ``vchunks`` comes from :func:`virtual_chunk_shape`.

    Raises
    ------
    InvalidReferenceError
        A virtual chunk would straddle two stored chunks (``vchunks`` does not fit ``chunks``).
    """
    nd = len(chunks)
    starts = [i * v for i, v in zip(vindex, vchunks, strict=True)]
    source = tuple(s // c for s, c in zip(starts, chunks, strict=True))
    local = [s - q * c for s, q, c in zip(starts, source, chunks, strict=True)]
    ext = [min(v, c - s) for v, c, s in zip(vchunks, chunks, local, strict=True)]
    for j in range(nd):
        # a clipped axis is only allowed where the cut-off part lies outside the array
        if ext[j] < vchunks[j] and (source[j] + 1) * chunks[j] < shape[j]:
            raise InvalidReferenceError(
                f"virtual chunk {tuple(vindex)} of shape {tuple(vchunks)} straddles two stored "
                f"chunks of shape {tuple(chunks)} along axis {j}"
            )
    src_strides = [math.prod(chunks[j + 1 :]) * itemsize for j in range(nd)]
    dst_strides = [math.prod(vchunks[j + 1 :]) * itemsize for j in range(nd)]
    nbytes = math.prod(vchunks) * itemsize
    k = nd - 1  # first axis (from the end) the clipped box does not span whole in both layouts
    while k > 0 and ext[k] == chunks[k] == vchunks[k]:
        k -= 1
    run_len = ext[k] * src_strides[k]
    src = np.array([sum(s * st for s, st in zip(local, src_strides, strict=True))], np.int64)
    dst = np.zeros(1, np.int64)
    for j in range(k):
        step = np.arange(ext[j], dtype=np.int64)
        src = (src[:, None] + step[None, :] * src_strides[j]).reshape(-1)
        dst = (dst[:, None] + step[None, :] * dst_strides[j]).reshape(-1)
    # merge runs adjacent in both the stored and the virtual chunk
    lengths = np.full(src.size, run_len, np.int64)
    if src.size > 1:
        joint = (np.diff(src) == run_len) & (np.diff(dst) == run_len)
        head = np.concatenate(([True], ~joint))
        group = np.cumsum(head) - 1
        lengths = np.bincount(group, minlength=int(group[-1]) + 1).astype(np.int64) * run_len
        src, dst = src[head], dst[head]
    return VirtualRuns(source, src, dst, lengths, nbytes)
