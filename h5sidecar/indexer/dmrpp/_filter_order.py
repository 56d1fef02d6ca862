"""The order of a fletcher32 filter among others, checked on one chunk.

DMR++ documents name a variable's filters in one ``compressionType`` list, and build_dmrpp has
not always written them in the order HDF5 applied them: a netCDF-4 file whose pipeline is
fletcher32 then deflate is described as ``"shuffle deflate fletcher32"``.  Decoding in the
written order then fails on every chunk (the checksum is taken over other bytes).  The checksum
also tells the right order: the smallest stored chunk is read once and decoded with the order
written, then with fletcher32 first and last; the first order that decodes to a whole chunk is
kept, and a variable no order decodes is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numcodecs
import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import fail
from h5sidecar.indexer.dmrpp._dmrpp_variable import ReadRanges
from h5sidecar.references import ChunkManifest

__all__ = ["settle_fletcher32"]

Pipeline = tuple[Mapping[str, Any], ...]


def _decodes(pipeline: Pipeline, data: bytes, nbytes: int) -> bool:
    buf: Any = data
    try:
        for config in reversed(pipeline):
            buf = numcodecs.get_codec(dict(config)).decode(buf)
    except Exception:  # noqa: BLE001 - any codec's refusal means: not this order
        return False
    return int(np.asarray(buf).nbytes) == nbytes


def _orders(pipeline: Pipeline) -> list[Pipeline]:
    check = next(f for f in pipeline if f.get("id") == "fletcher32")
    others = tuple(f for f in pipeline if f.get("id") != "fletcher32")
    out: list[Pipeline] = []
    for order in (pipeline, (check, *others), (*others, check)):
        if order not in out:
            out.append(order)
    return out


def settle_fletcher32(
    pipeline: Pipeline,
    manifest: ChunkManifest,
    chunk_shape: Sequence[int],
    itemsize: int,
    read: ReadRanges | None,
) -> tuple[Pipeline, str]:
    """The pipeline (encode order) that decodes the variable's chunks, and a note.

    Unchanged without a fletcher32 among other filters, without a stored chunk or without
    ``read``.

    Raises
    ------
    Skip
        ``unsupported_filter`` when no order decodes the chunk read.
    """
    ids = [f.get("id") for f in pipeline]
    codes = manifest.codes.reshape(-1)
    stored = np.flatnonzero(codes >= 0)
    if "fletcher32" not in ids or len(ids) < 2 or read is None or not stored.size:
        return pipeline, ""
    lengths = manifest.lengths.reshape(-1)
    pick = int(stored[np.argmin(lengths[stored])])
    offset, length = int(manifest.offsets.reshape(-1)[pick]), int(lengths[pick])
    (data,) = read(manifest.urls[int(codes[pick])], [(offset, length)])
    nbytes = math.prod(chunk_shape) * itemsize
    for order in _orders(pipeline):
        if _decodes(order, data, nbytes):
            if order == pipeline:
                return pipeline, ""
            names = " ".join(str(f.get("id")) for f in order)
            return order, (
                f"the document's filter order does not decode its chunks; checked on one chunk, "
                f"the order is {names}"
            )
    fail(
        ErrorKind.UNSUPPORTED_FILTER,
        "its chunk does not decode with the document's filters (fletcher32 checked first, "
        "last and where written): the DMR++ does not describe this file",
    )
