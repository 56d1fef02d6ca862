"""A variable's filters checked on one chunk: the order of a fletcher32 among others, and the
size of an element the document leaves to assumption.

DMR++ documents name a variable's filters in one ``compressionType`` list, which is meant to
be in the order HDF5 applied them (the corpus's files list fletcher32 first, last and between,
as their files do) -- but nothing in the document proves it, and a document that no longer
describes its file (offsets moved, filters changed) would decode to garbage.  A fletcher32
checksum can prove it: where one is among other filters, the smallest stored chunk is read
once and decoded in the order written, then with fletcher32 first and last; the first order
that decodes to a whole chunk with a good checksum is kept, and a variable no order decodes is
skipped.  The same one-chunk read checks a Structure's element size when the document gives no
member offsets and its chunks are filtered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numcodecs
import numpy as np

from h5sidecar.errors import ErrorKind
from h5sidecar.indexer._failures import fail
from h5sidecar.indexer.dmrpp._dmrpp_document import DRIFT
from h5sidecar.references import ChunkManifest

__all__ = ["ReadRanges", "settle_pipeline"]

Pipeline = tuple[Mapping[str, Any], ...]
#: Reads ``(offset, length)`` ranges of a URL.
ReadRanges = Callable[[str, list[tuple[int, int]]], list[bytes]]


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


def settle_pipeline(
    pipeline: Pipeline,
    manifest: ChunkManifest,
    chunk_shape: Sequence[int],
    itemsize: int,
    read: ReadRanges | None,
    *,
    check_size: bool = False,
) -> tuple[Pipeline, str]:
    """The pipeline (encode order) that decodes the variable's chunks, and a note.

    Checked on one chunk when a fletcher32 is among other filters, or when ``check_size``
    (the element size is an assumption: a filtered chunk must decode to whole elements).
    Unchanged otherwise, without a stored chunk, or (fletcher32 only) without ``read``.

    Raises
    ------
    Skip
        ``unsupported_filter`` when no order decodes the chunk read; ``other`` when the size
        must be checked and cannot be (no ``read``).
    """
    ids = [f.get("id") for f in pipeline]
    codes = manifest.codes.reshape(-1)
    stored = np.flatnonzero(codes >= 0)
    fletcher = "fletcher32" in ids and len(ids) > 1
    if not stored.size or not pipeline or not (fletcher or check_size):
        return pipeline, ""
    if read is None:
        if check_size:
            fail(ErrorKind.OTHER,
                 "the document gives no structOffset and its chunks are filtered: the element "
                 "size cannot be checked without reading one")  # fmt: skip
        return pipeline, ""
    lengths = manifest.lengths.reshape(-1)
    pick = int(stored[np.argmin(lengths[stored])])
    offset, length = int(manifest.offsets.reshape(-1)[pick]), int(lengths[pick])
    (data,) = read(manifest.urls[int(codes[pick])], [(offset, length)])
    nbytes = math.prod(chunk_shape) * itemsize
    for order in _orders(pipeline) if fletcher else [pipeline]:
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
        "its chunk does not decode to whole elements with the document's filters (a fletcher32 "
        f"tried first, last and where written): {DRIFT}",
    )
