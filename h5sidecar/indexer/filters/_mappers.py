"""HDF5 filter pipelines -> numcodecs codec configs.

The pipeline is read from the dataset creation property list (``get_nfilters`` /
``get_filter``), which holds the *local* ``cd_values`` filled in by each filter's ``set_local``
callback (element size for shuffle, all szip parameters, ...), not from h5py's high-level
properties, which hide unknown filters.

Each HDF5 filter maps to zero or more numcodecs configs; the whole pipeline goes into Zarr v2
``filters`` in HDF5 (encode) order, and Zarr decodes them in reverse, as HDF5 does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h5py
import hdf5plugin  # noqa: F401  (registers the plugin filters, so h5z.filter_avail sees them)
import numpy as np

from h5sidecar.codecs import NbitCustomFloatError, nbit_fields
from h5sidecar.errors import UnsupportedFeatureError
from h5sidecar.indexer._failures import dcpl

__all__ = ["HDF5Filter", "hdf5_filters", "per_filter_codecs", "pipeline_for"]

Config = dict[str, Any]


@dataclass(frozen=True, slots=True)
class HDF5Filter:
    """One entry of a dataset's filter pipeline, as stored in its creation property list.

    Attributes
    ----------
    id : int
        HDF5 filter identifier (1 deflate, 2 shuffle, 3 fletcher32, 32000+ registered plugins).
    flags : int
        Filter flags (``H5Z_FLAG_OPTIONAL`` = 1: HDF5 may skip the filter for a chunk).
    cd_values : tuple of int
        Client data values (after ``set_local``), as unsigned 32-bit integers.
    name : str
        The name recorded in the file (may be empty or differ between writers).
    """

    id: int
    flags: int
    cd_values: tuple[int, ...]
    name: str

    def describe(self) -> str:
        """Human-readable identity for error messages."""
        return f"HDF5 filter {self.id} ({self.name or 'unnamed'}, cd_values={list(self.cd_values)})"


def hdf5_filters(dset: h5py.Dataset) -> tuple[HDF5Filter, ...]:
    """The filter pipeline of ``dset`` in encode order.

    Parameters
    ----------
    dset : h5py.Dataset

    Returns
    -------
    tuple of HDF5Filter
        Empty for contiguous/compact datasets and unfiltered chunked ones.
    """
    plist = dcpl(dset)
    out = []
    for i in range(plist.get_nfilters()):
        code, flags, cd_values, name = plist.get_filter(i)
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        out.append(HDF5Filter(int(code), int(flags), tuple(int(v) for v in cd_values), name))
    return tuple(out)


# -- one mapper per HDF5 filter id ---------------------------------------------------------------
# A mapper receives the filter, the dataset (some filters need the dtype or chunk shape) and
# where the filter sits in the pipeline, and returns the numcodecs configs, in encode order, that
# undo exactly what the filter did.


@dataclass(frozen=True, slots=True)
class _Position:
    """Where a filter sits: whether every filter before it left the chunk unchanged in size
    (``size_preserving``) or entirely unchanged (``first``)."""

    first: bool
    size_preserving: bool


Mapper = Callable[[HDF5Filter, h5py.Dataset, _Position], list[Config]]


def _chunk_nbytes(dset: h5py.Dataset) -> int:
    return int(np.prod(dset.chunks or dset.shape or (1,))) * dset.dtype.itemsize


def _cd(f: HDF5Filter, i: int, default: int) -> int:
    return f.cd_values[i] if len(f.cd_values) > i else default


def _require_first(f: HDF5Filter, pos: _Position, what: str) -> None:
    if not pos.first:
        raise _unsupported(
            f, f"{what} must be the first filter of the pipeline to be decoded exactly"
        )


def _deflate(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    # HDF5's deflate writes a zlib stream (header + adler32), which numcodecs "zlib" reads.
    return [{"id": "zlib", "level": int(min(max(_cd(f, 0, 6), 0), 9))}]


def _shuffle(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    # set_local stores the element size in cd_values[0]; fall back to the dtype's size.
    size = _cd(f, 0, dset.dtype.itemsize)
    if size <= 1:
        return []  # HDF5 skips shuffling of 1-byte elements: nothing to undo
    return [{"id": "shuffle", "elementsize": int(size)}]


def _fletcher32(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    # numcodecs' Fletcher32 is HDF5's variant: a 4-byte checksum appended to the chunk, verified
    # and stripped on decode (a mismatch raises).
    return [{"id": "fletcher32"}]


def _szip(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    if len(f.cd_values) < 4:
        raise _unsupported(
            f, "szip needs 4 parameters (mask, pixels/block, bits/pixel, pixels/line)"
        )
    mask, ppb, bpp, pps = f.cd_values[:4]
    return [
        {
            "id": "h5sidecar.szip",
            "options_mask": mask,
            "pixels_per_block": ppb,
            "bits_per_pixel": bpp,
            "pixels_per_scanline": pps,
        }
    ]


def _nbit(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    if len(f.cd_values) < 5 or _cd(f, 1, 0):
        return []  # "need not compress": the filter stored the data unchanged
    _require_first(f, pos, "nbit")
    try:
        itemsize, fields = nbit_fields(f.cd_values, dset.id.get_type())
    except NbitCustomFloatError as exc:
        raise _unsupported(f, str(exc)) from None
    except (IndexError, ValueError) as exc:
        raise _unsupported(f, f"malformed nbit parameters ({exc})") from None
    return [
        {
            "id": "h5sidecar.nbit",
            "itemsize": itemsize,
            "nelements": f.cd_values[2],
            "fields": fields,
        }
    ]


def _scaleoffset(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    cd = f.cd_values
    if len(cd) != 20:
        raise _unsupported(f, "scaleoffset needs its 20 local parameters")
    if cd[3] == 1 and cd[0] != 0:
        raise _unsupported(f, "the E-scale method of scaleoffset is not implemented by HDF5 itself")
    if dset.dtype.kind not in "iuf" or dset.dtype.itemsize != cd[4]:
        raise _unsupported(f, f"scaleoffset on dtype {dset.dtype} is not supported")
    _require_first(f, pos, "scaleoffset")
    return [{"id": "h5sidecar.scaleoffset", "dtype": dset.dtype.str, "cd_values": list(cd)}]


def _lzf(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    if not pos.size_preserving:
        raise _unsupported(f, "LZF needs the decoded size, unknown after a size-changing filter")
    return [{"id": "h5sidecar.lzf", "nbytes": _chunk_nbytes(dset)}]


_BLOSC_CNAMES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}


def _blosc(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    # numcodecs Blosc decodes any blosc1 buffer (the header says how); the other keys only
    # matter when re-encoding.
    return [
        {
            "id": "blosc",
            "cname": _BLOSC_CNAMES.get(_cd(f, 6, 0), "blosclz"),
            "clevel": _cd(f, 4, 5),
            "shuffle": _cd(f, 5, 1),
            "blocksize": 0,
        }
    ]


def _lz4(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    return [{"id": "h5sidecar.lz4", "blocksize": _cd(f, 0, 0)}]


def _bitshuffle(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    compression = _cd(f, 4, 0)
    if compression not in (0, 2, 3):
        raise _unsupported(f, f"unknown bitshuffle compression code {compression}")
    return [
        {
            "id": "h5sidecar.bitshuffle",
            "elementsize": _cd(f, 2, dset.dtype.itemsize),
            "blocksize": _cd(f, 3, 0),
            "compression": compression,
            "level": _cd(f, 5, 3),
        }
    ]


def _bzip2(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    return [{"id": "bz2", "level": int(min(max(_cd(f, 0, 9), 1), 9))}]


def _zstd(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    return [{"id": "zstd", "level": _cd(f, 0, 3)}]


def _blosc2(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    return [{"id": "h5sidecar.blosc2", "typesize": _cd(f, 2, 1), "clevel": _cd(f, 4, 5)}]


def _zfp(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    _require_first(f, pos, "ZFP")
    if len(f.cd_values) < 4:
        raise _unsupported(f, "the H5Z-ZFP header is missing from cd_values")
    return [{"id": "h5sidecar.zfp", "header": list(f.cd_values[1:])}]


def _mafisc(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    raise _unsupported(f, "MAFISC (an LZMA variant with its own predictors) has no decoder here")


def _hdf5_plugin(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    """Fallback for filters only an HDF5 plugin decodes (SZ3, SPERR, ...)."""
    return _through_plugin(f, dset, pos, f.cd_values)


def _through_plugin(
    f: HDF5Filter, dset: h5py.Dataset, pos: _Position, cd_values: tuple[int, ...]
) -> list[Config]:
    if not h5py.h5z.filter_avail(f.id):
        raise _unsupported(f, "no codec decodes it and no HDF5 plugin for it is installed")
    _require_first(f, pos, "a filter decoded through its HDF5 plugin")
    return [
        {
            "id": "h5sidecar.hdf5filter",
            "filter_id": f.id,
            "flags": f.flags,
            "cd_values": list(cd_values),
            "dtype": dset.dtype.str,
            "chunks": list(dset.chunks),
        }
    ]


_SZ_USER_PARMS = 9  # error-bound mode + four doubles, what H5Pset_filter takes for SZ


def _sz(f: HDF5Filter, dset: h5py.Dataset, pos: _Position) -> list[Config]:
    """SZ (32017) and SZ3 (32024): decoded by their HDF5 plugin, created with *user* parameters.

    Their set_local rejects the local parameters stored in the file (rank, type, dims and, in
    newer files, the error bounds) and older files lack the bounds altogether.  Decoding needs
    none of them (the SZ stream carries its own header and set_local recomputes the dims from
    the chunk shape), so the stored bounds are passed back when present, else a zero bound.
    """
    cd = f.cd_values
    rank = cd[0] if cd else 0
    stored = cd[-_SZ_USER_PARMS:] if len(cd) == 2 + rank + _SZ_USER_PARMS else None
    return _through_plugin(f, dset, pos, stored or (0,) * _SZ_USER_PARMS)


_MAPPERS: dict[int, Mapper] = {
    1: _deflate,
    2: _shuffle,
    3: _fletcher32,
    4: _szip,
    5: _nbit,
    6: _scaleoffset,
    307: _bzip2,
    32000: _lzf,
    32001: _blosc,
    32002: _mafisc,
    32004: _lz4,
    32008: _bitshuffle,
    32013: _zfp,
    32015: _zstd,
    32017: _sz,
    32024: _sz,
    32026: _blosc2,
}

#: Filters that never change the chunk's size (so a later LZF still knows its output size).
_SIZE_PRESERVING = frozenset({2})


def _unsupported(f: HDF5Filter, why: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        # no "use on_unsupported='skip'" here: with the default (skip) this text is the skip
        # record's reason, and the advice is added where the error is raised instead
        f"{f.describe()}: {why}. Variables using it cannot be read through references; "
        "to read them, re-encode the source with a supported filter (e.g. h5repack -f GZIP=4)."
    )


def per_filter_codecs(dset: h5py.Dataset) -> list[list[Config]]:
    """The codec configs of each HDF5 filter of ``dset`` (one list per filter, encode order)."""
    out: list[list[Config]] = []
    first = size_preserving = True
    for f in hdf5_filters(dset):
        mapper = _MAPPERS.get(f.id, _hdf5_plugin)
        codecs = mapper(f, dset, _Position(first, size_preserving))
        out.append(codecs)
        first = first and not codecs
        size_preserving = size_preserving and (not codecs or f.id in _SIZE_PRESERVING)
    return out


def pipeline_for(dset: h5py.Dataset) -> tuple[Config, ...]:
    """numcodecs configs that decode the chunks of ``dset``, in encode order.

    Parameters
    ----------
    dset : h5py.Dataset
        Any dataset; unfiltered ones give an empty pipeline.

    Returns
    -------
    tuple of dict
        Codec configs for Zarr v2 ``filters`` (decoded in reverse order).

    Raises
    ------
    UnsupportedFeatureError
        When a filter cannot be mapped; the message names the filter id, name and cd_values and
        says why.
    """
    return tuple(c for codecs in per_filter_codecs(dset) for c in codecs)
