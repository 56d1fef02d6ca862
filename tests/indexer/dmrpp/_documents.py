"""Handmade DMR++ documents for HDF5 files written in a test: the HDF5 indexer's chunk table
written as ``dmrpp:chunk`` elements, with the parts a test changes given as arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

from h5sidecar.indexer import index_granule

HEAD = (
    '<?xml version="1.0" encoding="ISO-8859-1"?>\n'
    '<Dataset xmlns="http://xml.opendap.org/ns/DAP/4.0#" '
    'xmlns:dmrpp="http://xml.opendap.org/dap/dmrpp/1.0.0#" dapVersion="4.0" dmrVersion="1.0" '
    'name="g.h5" dmrpp:href="{href}" dmrpp:version="3.21.1">\n'
)
DAP = {"<f4": "Float32", "<i4": "Int32", "<i2": "Int16", "|u1": "Byte", "<f8": "Float64"}


def chunk_rows(path: Path, name: str) -> tuple[list[str], dict[str, Any]]:
    """``dmrpp:chunk`` elements of a dataset, from the HDF5 indexer's manifest."""
    arr = index_granule(str(path)).arrays[name]
    rows = []
    for index in np.ndindex(*arr.manifest.grid_shape):
        if arr.manifest.codes[index] < 0:
            continue
        pos = ",".join(str(i * c) for i, c in zip(index, arr.meta.chunks, strict=True))
        off, n = int(arr.manifest.offsets[index]), int(arr.manifest.lengths[index])
        rows.append(f'<dmrpp:chunk offset="{off}" nBytes="{n}" chunkPositionInArray="[{pos}]"/>')
    return rows, {"chunks": arr.meta.chunks, "dtype": arr.meta.dtype}


def document(
    path: Path,
    name: str,
    *,
    href: str = "OPeNDAP_DMRpp_DATA_ACCESS_URL",
    filters: str = "",
    byte_order: str | None = "LE",
    rows: list[str] | None = None,
    body: str = "",
) -> str:
    """A DMR++ for dataset ``name`` of ``path`` (two attributes, one of build_dmrpp's own)."""
    found, meta = chunk_rows(path, name)
    with h5py.File(path) as f:
        shape = f[name].shape
    dims = "".join(f'<Dim size="{s}"/>' for s in shape)
    order = f' byteOrder="{byte_order}"' if byte_order else ""
    kind = f' compressionType="{filters}"' if filters else ""
    sizes = " ".join(str(c) for c in meta["chunks"])
    chunks = "\n".join(found if rows is None else rows)
    return (
        HEAD.format(href=href)
        + f'<{DAP[meta["dtype"]]} name="{name}">{dims}'
        + '<Attribute name="units" type="String"><Value>K</Value></Attribute>'
        + '<Attribute name="scale_factor" type="Float32"><Value>0.5</Value></Attribute>'
        + f'<Attribute name="origname" type="String"><Value>{name}</Value></Attribute>'
        + f"<dmrpp:chunks{kind}{order}><dmrpp:chunkDimensionSizes>{sizes}"
        + f"</dmrpp:chunkDimensionSizes>{chunks}</dmrpp:chunks></{DAP[meta['dtype']]}>"
        + body
        + "</Dataset>\n"
    )


def write_beside(path: Path, text: str) -> str:
    """Write ``text`` as ``path``'s DMR++ (``PATH.dmrpp``); return the document's path."""
    doc = path.with_name(path.name + ".dmrpp")
    doc.write_text(text)
    return str(doc)
