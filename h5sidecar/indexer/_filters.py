"""HDF5 filter pipelines -> numcodecs codec configs.

The pipeline is read from the dataset creation property list (``get_nfilters`` /
``get_filter``), which holds the *local* ``cd_values`` filled in by each filter's ``set_local``
callback (element size for shuffle, all szip parameters, ...), not from h5py's high-level
properties, which hide unknown filters.

Each HDF5 filter maps to zero or more numcodecs configs; the whole pipeline goes into Zarr v2
``filters`` in HDF5 (encode) order, and Zarr decodes them in reverse, as HDF5 does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import h5py
import numcodecs
from numcodecs.compat import ensure_bytes

from h5sidecar.errors import UnsupportedFeatureError

__all__ = [
    "HDF5Filter",
    "chunk_pipeline",
    "decode_chunk",
    "filter_mask_differs",
    "hdf5_filters",
    "pipeline_for",
]

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
    plist = dset.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        code, flags, cd_values, name = plist.get_filter(i)
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        out.append(HDF5Filter(int(code), int(flags), tuple(int(v) for v in cd_values), name))
    return tuple(out)


# -- one mapper per HDF5 filter id ---------------------------------------------------------------
# A mapper receives the filter and the dataset (some filters need the dtype) and returns the
# numcodecs configs, in encode order, that undo exactly what the filter did.

Mapper = Callable[[HDF5Filter, h5py.Dataset], list[Config]]


def _deflate(f: HDF5Filter, dset: h5py.Dataset) -> list[Config]:
    # HDF5's deflate writes a zlib stream (header + adler32), which numcodecs "zlib" reads.
    level = f.cd_values[0] if f.cd_values else 6
    return [{"id": "zlib", "level": int(min(max(level, 0), 9))}]


def _shuffle(f: HDF5Filter, dset: h5py.Dataset) -> list[Config]:
    # set_local stores the element size in cd_values[0]; fall back to the dtype's size.
    size = f.cd_values[0] if f.cd_values else dset.dtype.itemsize
    if size <= 1:
        return []  # HDF5 skips shuffling of 1-byte elements: nothing to undo
    return [{"id": "shuffle", "elementsize": int(size)}]


def _fletcher32(f: HDF5Filter, dset: h5py.Dataset) -> list[Config]:
    # numcodecs' Fletcher32 is HDF5's variant: a 4-byte checksum appended to the chunk, verified
    # and stripped on decode (a mismatch raises).
    return [{"id": "fletcher32"}]


_MAPPERS: dict[int, Mapper] = {
    1: _deflate,
    2: _shuffle,
    3: _fletcher32,
}


def _unsupported(f: HDF5Filter, why: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"{f.describe()}: {why}. Variables using it cannot be read through references; "
        "index with on_unsupported='skip' to record them as skipped, or re-encode the source "
        "(e.g. h5repack -f GZIP=4)."
    )


def _map_filter(f: HDF5Filter, dset: h5py.Dataset) -> list[Config]:
    mapper = _MAPPERS.get(f.id)
    if mapper is None:
        raise _unsupported(f, "no numcodecs codec decodes this filter")
    return mapper(f, dset)


def _per_filter(dset: h5py.Dataset) -> list[list[Config]]:
    return [_map_filter(f, dset) for f in hdf5_filters(dset)]


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
    return tuple(c for codecs in _per_filter(dset) for c in codecs)


def filter_mask_differs(filter_mask: int, n_filters: int) -> bool:
    """True when a chunk's ``filter_mask`` says some declared filter was not applied to it.

    HDF5 sets bit *i* of a chunk's filter mask when filter *i* of the pipeline was skipped for
    that chunk (an optional filter that failed, or a partial edge chunk of a dataset created
    with ``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``).  Such a chunk cannot be decoded with the
    array's declared pipeline: the indexer materialises it instead.

    Parameters
    ----------
    filter_mask : int
        The chunk's mask (``StoreInfo.filter_mask`` from ``chunk_iter``/``get_chunk_info``).
    n_filters : int
        Number of filters in the dataset's pipeline.
    """
    return bool(int(filter_mask) & ((1 << n_filters) - 1))


def chunk_pipeline(dset: h5py.Dataset, filter_mask: int) -> tuple[Config, ...]:
    """The pipeline actually applied to a chunk with the given ``filter_mask``.

    Filters whose bit is set in the mask are left out.  Use it to decode such a chunk's raw
    bytes when materialising it.

    Parameters
    ----------
    dset : h5py.Dataset
    filter_mask : int

    Returns
    -------
    tuple of dict
        Codec configs in encode order.
    """
    per = _per_filter(dset)
    return tuple(c for i, codecs in enumerate(per) if not (filter_mask >> i) & 1 for c in codecs)


def decode_chunk(raw: bytes, pipeline: Sequence[Config]) -> bytes:
    """Run encoded chunk bytes through ``pipeline`` backwards (what a Zarr v2 reader does).

    Parameters
    ----------
    raw : bytes
        The chunk as stored in the file.
    pipeline : sequence of dict
        Codec configs in encode order.

    Returns
    -------
    bytes
        The decoded chunk bytes (C order, the full chunk shape).
    """
    buf: Any = raw
    for cfg in reversed(pipeline):
        buf = numcodecs.get_codec(dict(cfg)).decode(buf)
    return ensure_bytes(buf)
