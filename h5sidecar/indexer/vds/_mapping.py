"""Virtual dataset mappings resolved as HDF5 resolves them: which block of which source lands where.

HDF5 works out a VDS's extent, and clips its unlimited mappings, when it opens the dataset
with the default view "last available" (``H5D_VDS_LAST_AVAILABLE``).  It can only do so when it
finds the source files, which it does not for a granule opened as a file object (the
indexer's case, S3 included): there ``dset.shape`` says what was stored, often 0 along the
unlimited dimension.  This module repeats HDF5's resolution from the sources the indexer opens:

* a mapping pairs a virtual and a source selection, each ``ALL`` or one regular hyperslab; a
  hyperslab may be unlimited along one dimension (an unlimited count of blocks, or one
  unlimited block, the form HDF5 stores ``vsource[:UNLIMITED]`` in);
* an unlimited mapping with an unlimited source selection covers as many slices of that
  dimension as the source selection holds inside the source's current extent (HDF5's
  ``H5S_hyper_get_clip_extent_match``); a missing source covers none;
* a "printf" mapping (``%b`` in a source name: unlimited virtual, limited source selection)
  takes virtual block ``b`` from source ``b``, for the sources found before the first missing
  one (HDF5's default printf gap is 0);
* along an unlimited dimension the extent is the furthest any mapping reaches, raised to what
  the limited selections need (HDF5's ``min_dims``); the stored extent is not used there, as
  HDF5 shrinks it too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import h5py

from h5sidecar.errors import ErrorKind, NotHDF5Error, SourceNotFoundError
from h5sidecar.indexer._failures import H5PY_ERRORS, dcpl, fail, reraise_io_failure
from h5sidecar.indexer.layout._external import resolve_external

__all__ = [
    "Opener",
    "Piece",
    "require_a_source",
    "source_dataset",
    "source_url",
    "vds_extent",
    "vds_pieces",
]

_U = h5py.h5s.UNLIMITED
#: ``%b`` sources probed at most (HDF5 stops at the first missing one).
_MAX_BLOCKS = 100_000
#: Opens a source (url) as an h5py.File inside the caller's exit stack.
Opener = Callable[[str], h5py.File]


@dataclass(frozen=True)
class Piece:
    """One block: ``shape`` elements at ``vstart`` in the VDS come from ``sstart`` in a source."""

    vstart: tuple[int, ...]
    shape: tuple[int, ...]
    file: str
    dataset: str
    #: None: the whole source dataset, whose extent HDF5 requires to be ``shape``
    sstart: tuple[int, ...] | None
    #: the source is read whole, block after block in C order: valid only when a block spans
    #: the source's trailing dimensions entirely (then block b is a slab of rows)
    rows_of_all: bool = False


@dataclass(frozen=True)
class _Slab:
    """An ``ALL`` or regular hyperslab selection (HDF5 stores touching blocks as one block).

    ``unlimited`` is the dimension whose count or block is unlimited (HDF5 allows one).
    """

    start: tuple[int, ...]
    stride: tuple[int, ...]
    count: tuple[int, ...]
    block: tuple[int, ...]
    is_all: bool = False
    unlimited: int | None = None

    @classmethod
    def of(cls, space: h5py.h5s.SpaceID) -> _Slab:
        kind = space.get_select_type()
        if kind == h5py.h5s.SEL_ALL:
            shape = tuple(int(n) for n in space.shape)
            ones = (1,) * len(shape)
            return cls((0,) * len(shape), ones, ones, shape, is_all=True)
        if kind != h5py.h5s.SEL_HYPERSLABS or not space.is_regular_hyperslab():
            fail(ErrorKind.VIRTUAL_DATASET, "a virtual mapping selects something other than blocks")
        start, stride, count, block = (
            tuple(int(v) for v in part) for part in space.get_regular_hyperslab()
        )
        unlimited = [d for d in range(len(start)) if _U in (count[d], block[d])]
        if len(unlimited) > 1:
            fail(ErrorKind.VIRTUAL_DATASET, "a virtual mapping is unlimited in two dimensions")
        return cls(start, stride, count, block, unlimited=unlimited[0] if unlimited else None)

    def n_blocks(self) -> int:
        """Blocks of a limited selection."""
        return math.prod(self.count)

    def nth_block(self, b: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(start, shape) of block ``b``, blocks numbered in C order over the counts."""
        idx, rest = [], b
        for c in reversed(self.count):
            rest, i = divmod(rest, c)
            idx.append(i)
        idx.reverse()
        start = tuple(s + i * st for s, i, st in zip(self.start, idx, self.stride, strict=True))
        return start, self.block

    def end(self, d: int) -> int:
        """One past the last element selected along a limited dimension ``d``."""
        return self.start[d] + (self.count[d] - 1) * self.stride[d] + self.block[d]

    def runs(self, extent: int) -> list[tuple[int, int]]:
        """(first, length) of the runs selected along the unlimited dimension inside ``extent``."""
        d = self.unlimited
        assert d is not None
        s, st, c, b = self.start[d], self.stride[d], self.count[d], self.block[d]
        if b == _U:
            return [(s, extent - s)] if extent > s else []
        out: list[tuple[int, int]] = []
        pos = s
        while pos < extent and (c == _U or len(out) < c):
            out.append((pos, min(b, extent - pos)))
            pos += st
        return out

    def clip_extent(self, n: int) -> int:
        """The extent along the unlimited dimension at which this selection holds ``n`` slices
        (a partial last block counts its slices only, as in the view "last available")."""
        d = self.unlimited
        assert d is not None
        s, st, b = self.start[d], self.stride[d], self.block[d]
        if n == 0:
            return 0
        if b == _U:
            return s + n
        full, rem = divmod(n, b)
        return s + full * st + rem if rem else s + (full - 1) * st + b


@dataclass(frozen=True)
class _Mapping:
    file: str
    dataset: str
    virtual: _Slab
    source: _Slab

    @property
    def printf(self) -> bool:
        """Virtual block ``b`` from source ``b`` (HDF5 allows ``%b`` names only in this form)."""
        return self.virtual.unlimited is not None and self.source.unlimited is None


def _mappings(dset: h5py.Dataset) -> list[_Mapping]:
    plist = dcpl(dset)
    return [
        _Mapping(
            plist.get_virtual_filename(i),
            plist.get_virtual_dsetname(i),
            _Slab.of(plist.get_virtual_vspace(i)),
            _Slab.of(plist.get_virtual_srcspace(i)),
        )
        for i in range(plist.get_virtual_count())
    ]


def _expand(pattern: str, b: int) -> str:
    """HDF5's printf-style source names: ``%b`` is the block number, ``%%`` a percent sign."""
    return re.sub(r"%%|%b", lambda m: "%" if m.group() == "%%" else str(b), pattern)


def source_url(name: str, granule_url: str) -> str:
    """Where a source file named in a mapping is (``.`` is the granule itself)."""
    return granule_url if name == "." else resolve_external(name, granule_url)


def source_dataset(url: str, name: str, opener: Opener) -> h5py.Dataset | None:
    """The source dataset, or ``None`` when its file or the dataset does not exist."""
    try:
        h5 = opener(url)
    except SourceNotFoundError:
        return None  # HDF5 reads a missing source as the fill value too
    except NotHDF5Error as exc:
        fail(ErrorKind.VIRTUAL_DATASET, f"the source file {url} cannot be opened: {exc}")
    try:
        obj = h5.get(name)
    except H5PY_ERRORS as exc:
        reraise_io_failure(exc)
        return None
    return obj if isinstance(obj, h5py.Dataset) else None


def _names(m: _Mapping) -> tuple[str, str]:
    """Source file and dataset names of a mapping that is not printf (``%%`` still means %)."""
    return _expand(m.file, 0), _expand(m.dataset, 0)


def _find(m: _Mapping, b: int, granule_url: str, opener: Opener) -> h5py.Dataset | None:
    return source_dataset(
        source_url(_expand(m.file, b), granule_url), _expand(m.dataset, b), opener
    )


def require_a_source(dset: h5py.Dataset, granule_url: str, opener: Opener) -> None:
    """Skip a VDS none of whose source datasets can be found.

    HDF5 reads such a VDS as fill values only, and gives it no extent at all along an unlimited
    dimension; either way the values it was made to show are elsewhere (source files not
    beside the granule), so an empty or fill-only array would be a silent loss.
    """
    mappings = _mappings(dset)
    if not mappings or any(_find(m, 0, granule_url, opener) is not None for m in mappings):
        return
    names = [f"{m.file}:{m.dataset}" for m in mappings]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    fail(
        ErrorKind.VIRTUAL_DATASET,
        f"none of its {len(names)} source dataset(s) can be found ({shown}), so HDF5 would read "
        "it as fill values only (with no extent along an unlimited dimension); put the "
        "source files beside the granule (paths are relative to it) and index it again",
    )


class _Resolved:
    """The mappings of one VDS with what HDF5 would clip them to (view "last available")."""

    def __init__(self, dset: h5py.Dataset, granule_url: str, opener: Opener) -> None:
        self.mappings = _mappings(dset)
        self.granule_url, self.opener = granule_url, opener
        #: per mapping: (the slices it covers (non-printf) or sources found (printf), the
        #: extent it reaches along its unlimited dimension)
        resolved = [self._resolve(m) for m in self.mappings]
        self.found = [found for found, _ in resolved]
        self.reach = [reach for _, reach in resolved]
        self.shape = self._extent(tuple(int(n) for n in (dset.shape or ())))

    def _resolve(self, m: _Mapping) -> tuple[int, int]:
        d = m.virtual.unlimited
        if d is None:
            return 0, 0
        if m.printf:
            n = 0
            while _find(m, n, self.granule_url, self.opener) is not None:
                n += 1
                if n == _MAX_BLOCKS:  # stop rather than give a truncated array
                    fail(ErrorKind.VIRTUAL_DATASET, f"more than {n} printf-named sources")
            v = m.virtual
            return n, (v.start[d] + (n - 1) * v.stride[d] + v.block[d] if n else 0)
        src = _find(m, 0, self.granule_url, self.opener)
        sd = m.source.unlimited
        assert sd is not None
        if src is None or src.ndim <= sd:
            return 0, 0
        n = sum(length for _, length in m.source.runs(int(src.shape[sd])))
        return n, m.virtual.clip_extent(n)

    def _extent(self, stored: tuple[int, ...]) -> tuple[int, ...]:
        shape = list(stored)
        for d in range(len(shape)):
            reaches = [
                r
                for m, r in zip(self.mappings, self.reach, strict=True)
                if m.virtual.unlimited == d
            ]
            if not reaches:
                continue  # HDF5 keeps the stored extent where no mapping is unlimited
            needed = [
                m.virtual.end(d)
                for m in self.mappings
                if not m.virtual.is_all and m.virtual.unlimited != d
            ]
            shape[d] = max(reaches + needed)
        return tuple(shape)


def vds_extent(dset: h5py.Dataset, granule_url: str, opener: Opener) -> tuple[int, ...]:
    """The extent HDF5 gives the VDS with its default view ("last available").

    Raises
    ------
    Skip
        When no source can be found, or a mapping is of a form this module cannot resolve.
    """
    require_a_source(dset, granule_url, opener)
    return _Resolved(dset, granule_url, opener).shape


def vds_pieces(
    dset: h5py.Dataset, shape: tuple[int, ...], granule_url: str, opener: Opener
) -> list[Piece]:
    """The blocks of a virtual dataset of extent ``shape``, clipped as HDF5 clips them."""
    resolved = _Resolved(dset, granule_url, opener)
    pieces: list[Piece] = []
    for m, found in zip(resolved.mappings, resolved.found, strict=True):
        if m.virtual.unlimited is None:
            pieces += _limited_pieces(m, shape)
        elif m.printf:
            pieces += _printf_pieces(m, found)
        else:
            src = _find(m, 0, granule_url, opener) if found else None
            if src is not None:
                pieces += _unlimited_pieces(m, found, tuple(int(n) for n in src.shape))
    return pieces


def _limited_pieces(m: _Mapping, shape: tuple[int, ...]) -> list[Piece]:
    """Block ``b`` of the virtual selection from block ``b`` of the source selection."""
    if m.virtual.is_all:
        return [Piece((0,) * len(shape), shape, *_names(m), None)]
    nv = m.virtual.n_blocks()
    out = []
    for b in range(nv):
        vstart, vshape = m.virtual.nth_block(b)
        if m.source.is_all and nv == 1:
            out.append(Piece(vstart, vshape, *_names(m), None))
            continue
        if m.source.is_all:
            rows = (b * vshape[0],) + (0,) * (len(shape) - 1)
            out.append(Piece(vstart, vshape, *_names(m), rows, rows_of_all=True))
            continue
        if m.source.n_blocks() != nv:
            fail(ErrorKind.VIRTUAL_DATASET, "virtual and source selections have other blocks")
        sstart, sshape = m.source.nth_block(b)
        if sshape != vshape:
            fail(ErrorKind.VIRTUAL_DATASET, "virtual and source selections have other blocks")
        out.append(Piece(vstart, vshape, *_names(m), sstart))
    return out


def _single_block(slab: _Slab, what: str) -> None:
    if any(c != 1 for d, c in enumerate(slab.count) if d != slab.unlimited):
        fail(
            ErrorKind.VIRTUAL_DATASET,
            f"an unlimited mapping's {what} selection repeats along a limited dimension",
        )


def _printf_pieces(m: _Mapping, found: int) -> list[Piece]:
    """Virtual block ``b`` from the source selection of source ``b`` (``%b`` names)."""
    _single_block(m.virtual, "virtual")
    d = m.virtual.unlimited
    assert d is not None
    # an ALL source selection of a printf mapping stores no extent: HDF5 reads the block's
    # shape from each source (beyond a short source: its fill value)
    if not m.source.is_all and (m.source.n_blocks() != 1 or m.source.block != m.virtual.block):
        fail(
            ErrorKind.VIRTUAL_DATASET,
            "a printf mapping's source selection is not one block of the virtual block's shape",
        )
    out = []
    for b in range(found):
        vstart = list(m.virtual.start)
        vstart[d] += b * m.virtual.stride[d]
        out.append(
            Piece(
                tuple(vstart),
                m.virtual.block,
                _expand(m.file, b),
                _expand(m.dataset, b),
                (0,) * len(vstart) if m.source.is_all else m.source.start,
            )
        )
    return out


def _unlimited_pieces(m: _Mapping, found: int, source_shape: tuple[int, ...]) -> list[Piece]:
    """The runs of the virtual selection clipped to ``found`` slices, paired in order with the
    runs of the source selection inside the source's extent."""
    d, sd = m.virtual.unlimited, m.source.unlimited
    assert d is not None and sd is not None
    _single_block(m.virtual, "virtual")
    _single_block(m.source, "source")
    others = [i for i in range(len(m.virtual.block)) if i != d]
    if d != sd or any(m.virtual.block[i] != m.source.block[i] for i in others):
        fail(ErrorKind.VIRTUAL_DATASET, "virtual and source selections have other blocks")
    vruns = m.virtual.runs(m.virtual.clip_extent(found))
    sruns = m.source.runs(source_shape[sd])
    out = []
    vi = si = 0
    vpos, vleft = vruns[0] if vruns else (0, 0)
    spos, sleft = sruns[0] if sruns else (0, 0)
    while vi < len(vruns) and si < len(sruns):
        n = min(vleft, sleft)
        shape = list(m.virtual.block)
        shape[d] = n
        vstart, sstart = list(m.virtual.start), list(m.source.start)
        vstart[d], sstart[sd] = vpos, spos
        out.append(Piece(tuple(vstart), tuple(shape), *_names(m), tuple(sstart)))
        vpos, vleft, spos, sleft = vpos + n, vleft - n, spos + n, sleft - n
        if not vleft and (vi := vi + 1) < len(vruns):
            vpos, vleft = vruns[vi]
        if not sleft and (si := si + 1) < len(sruns):
            spos, sleft = sruns[si]
    return out
