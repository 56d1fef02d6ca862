"""Per-chunk exceptions to a dataset's declared filter pipeline.

Two HDF5 quirks make a chunk's actual encoding differ from the pipeline in the dataset's
creation property list: the per-chunk *filter mask* (an optional filter skipped for that chunk)
and ``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS`` (partial edge chunks stored unfiltered, with a
zero mask).  The indexer asks :func:`chunk_pipeline_differs` and materialises such chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import h5py
import numcodecs
from numcodecs.compat import ensure_bytes

from h5sidecar._compat.h5py import chunk_opts, hdf5_library
from h5sidecar.errors import UnsupportedFeatureError
from h5sidecar.indexer._failures import dcpl
from h5sidecar.indexer.attrs._creation_messages import NativeCreation
from h5sidecar.indexer.filters._mappers import Config, per_filter_codecs

__all__ = [
    "chunk_pipeline",
    "chunk_pipeline_differs",
    "decode_chunk",
    "filter_mask_differs",
    "partial_edge_chunks_unfiltered",
]


def filter_mask_differs(filter_mask: int, n_filters: int) -> bool:
    """True when a chunk's ``filter_mask`` says some declared filter was not applied to it.

    HDF5 sets bit *i* of a chunk's filter mask when filter *i* of the pipeline was skipped for
    that chunk (an optional filter that failed, e.g. LZF on incompressible data).  Such a chunk
    cannot be decoded with the array's declared pipeline: the indexer materialises it instead.

    Parameters
    ----------
    filter_mask : int
        The chunk's mask (``StoreInfo.filter_mask`` from ``chunk_iter``/``get_chunk_info``).
    n_filters : int
        Number of filters in the dataset's pipeline.
    """
    return bool(int(filter_mask) & ((1 << n_filters) - 1))


_H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS = 0x2


def partial_edge_chunks_unfiltered(dset: h5py.Dataset) -> bool:
    """Whether ``dset`` stores its partial edge chunks *unfiltered* (an HDF5 quirk).

    ``H5Pset_chunk_opts(H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS)`` makes HDF5 skip the whole
    pipeline for chunks that extend past the dataset's extent, *without* recording it in the
    chunk's filter mask.  h5py does not expose ``H5Pget_chunk_opts``, so it is called through
    ctypes in the HDF5 library h5py itself loaded (:func:`h5sidecar._compat.h5py.chunk_opts`:
    same process state, same object ids).
    """
    plist = dcpl(dset)  # keep a reference: its id must stay open for the call
    if dset.chunks is None or not plist.get_nfilters():
        return False
    if hdf5_library() is None:
        raise UnsupportedFeatureError(
            "cannot find the HDF5 library h5py loaded, needed to read chunk options; "
            "install h5py from its wheels"
        )
    # known from the layout message when read natively: no property list copied for it
    opts = getattr(plist, "chunk_options", None) if isinstance(plist, NativeCreation) else None
    if opts is None:
        opts = chunk_opts(plist)
    if opts is None:
        raise UnsupportedFeatureError(
            f"cannot read the chunk options of {dset.name!r} (H5Pget_chunk_opts failed)"
        )
    return bool(opts & _H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS)


def _is_partial_edge(dset: h5py.Dataset, chunk_offset: Sequence[int]) -> bool:
    return any(o + c > s for o, c, s in zip(chunk_offset, dset.chunks, dset.shape, strict=True))


def chunk_pipeline_differs(
    dset: h5py.Dataset, filter_mask: int, chunk_offset: Sequence[int], *, unfiltered_edges: bool
) -> bool:
    """True when the chunk at ``chunk_offset`` was not encoded with the declared pipeline.

    Parameters
    ----------
    dset : h5py.Dataset
    filter_mask : int
        The chunk's filter mask.
    chunk_offset : sequence of int
        The chunk's offset in elements (``StoreInfo.chunk_offset``).
    unfiltered_edges : bool
        :func:`partial_edge_chunks_unfiltered` of the dataset (computed once per dataset).
    """
    n = dcpl(dset).get_nfilters()
    if n == 0:
        return False
    return filter_mask_differs(filter_mask, n) or (
        unfiltered_edges and _is_partial_edge(dset, chunk_offset)
    )


def chunk_pipeline(
    dset: h5py.Dataset, filter_mask: int, chunk_offset: Sequence[int] | None = None
) -> tuple[Config, ...]:
    """The pipeline actually applied to one chunk.

    Filters whose bit is set in ``filter_mask`` are left out, and so is every filter for a
    partial edge chunk of a dataset created with ``H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS``
    (when ``chunk_offset`` is given).  Use it to decode such a chunk's raw bytes when
    materialising it.

    Parameters
    ----------
    dset : h5py.Dataset
    filter_mask : int
    chunk_offset : sequence of int, optional

    Returns
    -------
    tuple of dict
        Codec configs in encode order.
    """
    if (
        chunk_offset is not None
        and _is_partial_edge(dset, chunk_offset)
        and partial_edge_chunks_unfiltered(dset)
    ):
        return ()
    per = per_filter_codecs(dset)
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
