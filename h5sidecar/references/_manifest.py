"""ChunkManifest: the columnar chunk references of one array.

A manifest is four things shaped like the array's chunk grid:

* ``codes``   int32[grid]: index into ``urls`` of the object holding the chunk, or
  ``MISSING`` (-1, the chunk is not stored: read it as the fill value) or ``INLINE`` (-2, the
  chunk's encoded bytes are held in ``inline``);
* ``offsets`` uint64[grid]: byte offset of the chunk in its object;
* ``lengths`` uint64[grid]: byte length of the (encoded) chunk;
* ``inline``  mapping flat C-order chunk index -> encoded chunk bytes (small or materialised
  chunks).

It is built once through :meth:`ChunkManifest.from_arrays`, which validates, and is immutable
afterwards (the arrays are made read-only).  No per-chunk Python object exists unless a caller
asks for one (:meth:`ChunkManifest.iter_refs`, meant for debugging and small arrays).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import numpy as np

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references.datacube._url_column import UrlColumn

__all__ = ["INLINE", "MISSING", "ChunkManifest", "chunk_grid_shape", "chunk_key"]

MISSING = -1
INLINE = -2


def chunk_grid_shape(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[int, ...]:
    """Number of chunks along each dimension (``ceil(shape / chunks)``; 0 for empty dims)."""
    if type(shape) is tuple and type(chunks) is tuple:
        # asked several times per array (ArrayMeta.grid_shape): remembered per pair
        return _grid_shape(shape, chunks)
    return _grid_shape.__wrapped__(tuple(shape), tuple(chunks))


@lru_cache(maxsize=4096)
def _grid_shape(shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) != len(chunks):
        raise InvalidReferenceError(f"shape {shape} and chunks {chunks} differ in rank")
    if any(c <= 0 for c in chunks):
        raise InvalidReferenceError(f"chunk sizes must be positive, got {chunks}")
    return tuple(-(-s // c) for s, c in zip(shape, chunks, strict=True))


def chunk_key(index: tuple[int, ...], separator: str = ".") -> str:
    """The Zarr v2 key of a chunk (``"0"`` for a 0-d array, else ``"i.j.k"``)."""
    if not index:
        return "0"
    return separator.join(str(i) for i in index)


class ChunkManifest:
    """Immutable, columnar chunk references of one array (see module docstring)."""

    __slots__ = ("_codes", "_inline", "_lengths", "_offsets", "_urls")

    #: a tuple, or a datacube's URL column (:class:`~h5sidecar.references.UrlColumn`)
    _urls: Sequence[str]
    _codes: np.ndarray
    _offsets: np.ndarray
    _lengths: np.ndarray
    _inline: Mapping[int, bytes]

    def __init__(self) -> None:  # pragma: no cover - use the constructors
        raise TypeError("build a ChunkManifest with ChunkManifest.from_arrays(...) or .empty(...)")

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        *,
        urls: Sequence[str],
        codes: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        inline: Mapping[int, bytes] | None = None,
    ) -> ChunkManifest:
        """Validate and wrap the arrays (copied only when dtype or layout must change).

        Raises
        ------
        InvalidReferenceError
            When shapes differ, codes point outside ``urls``, inline chunks and ``INLINE``
            codes disagree, or lengths are zero for stored chunks.
        """
        codes = np.require(codes, dtype=np.int32, requirements="C")
        offsets = np.require(offsets, dtype=np.uint64, requirements="C")
        lengths = np.require(lengths, dtype=np.uint64, requirements="C")
        if not (codes.shape == offsets.shape == lengths.shape):
            raise InvalidReferenceError(
                f"manifest arrays differ in shape: codes {codes.shape}, offsets {offsets.shape}, "
                f"lengths {lengths.shape}"
            )
        if not isinstance(urls, (tuple, UrlColumn)):  # (a UrlColumn: read-only already)
            urls = tuple(urls)
        if codes.size and (codes.max(initial=-3) >= len(urls) or codes.min(initial=0) < INLINE):
            raise InvalidReferenceError(
                f"manifest codes must lie in [-2, {len(urls) - 1}] for {len(urls)} url(s)"
            )
        inline_map = {int(k): bytes(v) for k, v in (inline or {}).items()}
        flat = codes.reshape(-1)
        inline_idx = np.flatnonzero(flat == INLINE)
        if set(inline_idx.tolist()) != set(inline_map):
            raise InvalidReferenceError(
                "inline chunks and INLINE codes disagree: "
                f"{len(inline_idx)} INLINE codes, {len(inline_map)} inline chunks"
            )
        stored = flat >= 0
        if np.any(lengths.reshape(-1)[stored] == 0):
            raise InvalidReferenceError("a stored chunk has length 0")
        return cls.from_checked(urls=urls, codes=codes, offsets=offsets, lengths=lengths,
                                inline=inline_map)

    @classmethod
    def from_checked(
        cls,
        *,
        urls: Sequence[str],
        codes: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        inline: Mapping[int, bytes],
    ) -> ChunkManifest:
        """Wrap arrays a decoder built and checked itself, without checking them again.

        For decoders that make every check of :meth:`from_arrays` while building their rows
        (:mod:`~h5sidecar.references.parquet_sidecar._manifests_file_small`): ``codes`` int32, ``offsets`` and
        ``lengths`` uint64, all C-ordered and of one shape; codes in ``[-2, len(urls))``;
        ``inline`` keyed by exactly the flat indices coded ``INLINE``; no stored chunk of
        length 0.  Its ~10 NumPy calls are most of a one-chunk manifest's cost, paid
        thousands of times in a datacube build.
        """
        self = object.__new__(cls)
        for arr in (codes, offsets, lengths):
            arr.flags.writeable = False
        self._urls = urls
        self._codes = codes
        self._offsets = offsets
        self._lengths = lengths
        self._inline = MappingProxyType(dict(inline))
        return self

    @classmethod
    def empty(cls, grid_shape: tuple[int, ...], urls: tuple[str, ...] = ()) -> ChunkManifest:
        """A manifest where every chunk is missing (read as the fill value)."""
        return cls.from_arrays(
            urls=urls,
            codes=np.full(grid_shape, MISSING, dtype=np.int32),
            offsets=np.zeros(grid_shape, dtype=np.uint64),
            lengths=np.zeros(grid_shape, dtype=np.uint64),
        )

    # -- accessors ----------------------------------------------------------------------------
    @property
    def urls(self) -> Sequence[str]:
        """The distinct source URLs chunks point into (usually exactly one: the granule; a
        tuple, or a built datacube's :class:`~h5sidecar.references.UrlColumn`)."""
        return self._urls

    @property
    def codes(self) -> np.ndarray:
        """int32[grid]: index into :attr:`urls`, ``MISSING`` (-1) or ``INLINE`` (-2)."""
        return self._codes

    @property
    def offsets(self) -> np.ndarray:
        """uint64[grid]: byte offsets of the chunks in their objects."""
        return self._offsets

    @property
    def lengths(self) -> np.ndarray:
        """uint64[grid]: byte lengths of the encoded chunks."""
        return self._lengths

    @property
    def inline(self) -> Mapping[int, bytes]:
        """Read-only mapping: flat C-order chunk index -> encoded chunk bytes."""
        return self._inline

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Shape of the chunk grid."""
        return tuple(self._codes.shape)

    @property
    def n_chunks(self) -> int:
        """Number of chunk positions in the grid."""
        return int(self._codes.size)

    @property
    def n_stored(self) -> int:
        """Chunks held as byte ranges in a source object."""
        return int(np.count_nonzero(self._codes >= 0))

    @property
    def n_inline(self) -> int:
        """Chunks whose bytes are held in the sidecar."""
        return len(self._inline)

    @property
    def n_missing(self) -> int:
        """Chunks not stored anywhere (they read as the fill value)."""
        return int(np.count_nonzero(self._codes == MISSING))

    @property
    def stored_bytes(self) -> int:
        """Total encoded bytes referenced in source objects."""
        return int(self._lengths[self._codes >= 0].sum(dtype=np.uint64))

    @property
    def inline_bytes(self) -> int:
        """Total encoded bytes held inline."""
        return sum(len(v) for v in self._inline.values())

    @property
    def nbytes(self) -> int:
        """Memory held by this manifest (arrays + inline bytes), for byte-bounded caches."""
        return int(
            self._codes.nbytes + self._offsets.nbytes + self._lengths.nbytes + self.inline_bytes
        )

    def get(self, index: tuple[int, ...]) -> tuple[str, int, int] | bytes | None:
        """One chunk's reference: ``(url, offset, length)``, inline ``bytes`` or ``None``."""
        code = int(self._codes[index])
        if code == MISSING:
            return None
        if code == INLINE:
            flat = int(np.ravel_multi_index(index, self.grid_shape)) if index else 0
            return self._inline[flat]
        return (self._urls[code], int(self._offsets[index]), int(self._lengths[index]))

    def iter_refs(self) -> Iterator[tuple[tuple[int, ...], tuple[str, int, int] | bytes]]:
        """Yield ``(chunk index, reference)`` for every stored or inline chunk (debugging aid)."""
        # numpy refuses nonzero() on 0-d arrays; the scalar case is handled below
        present = np.nonzero(self._codes != MISSING) if self._codes.ndim else ()
        for index in zip(*present, strict=True):
            idx = tuple(int(i) for i in index)
            ref = self.get(idx)
            assert ref is not None
            yield idx, ref
        if self._codes.ndim == 0 and int(self._codes) != MISSING:
            ref = self.get(())
            assert ref is not None
            yield (), ref

    def with_urls(self, urls: tuple[str, ...]) -> ChunkManifest:
        """The same manifest pointing at other URLs (e.g. after moving the granule)."""
        if len(urls) != len(self._urls):
            raise InvalidReferenceError(f"need {len(self._urls)} url(s), got {len(urls)}")
        return ChunkManifest.from_arrays(
            urls=urls,
            codes=self._codes,
            offsets=self._offsets,
            lengths=self._lengths,
            inline=self._inline,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChunkManifest):
            return NotImplemented
        return (
            self._urls == other._urls
            and np.array_equal(self._codes, other._codes)
            and np.array_equal(self._offsets[self._codes >= 0], other._offsets[other._codes >= 0])
            and np.array_equal(self._lengths[self._codes >= 0], other._lengths[other._codes >= 0])
            and dict(self._inline) == dict(other._inline)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"ChunkManifest(grid={self.grid_shape}, stored={self.n_stored}, "
            f"inline={self.n_inline}, missing={self.n_missing}, urls={self._urls!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle through the validating constructor (the arrays are read-only views).
        return (
            _rebuild,
            (self._urls, self._codes, self._offsets, self._lengths, dict(self._inline)),
        )


def _rebuild(
    urls: tuple[str, ...],
    codes: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    inline: dict[int, bytes],
) -> ChunkManifest:
    return ChunkManifest.from_arrays(
        urls=urls, codes=codes, offsets=offsets, lengths=lengths, inline=inline
    )
