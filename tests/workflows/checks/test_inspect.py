"""inspect_refs: counts, bytes, codecs and identity agree with h5py and the file system."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from h5sidecar.workflows import index_many, inspect_refs
from tests.workflows.conftest import write_granule


def test_inspect_agrees_with_h5py(tmp_path: Path) -> None:
    src = write_granule(tmp_path / "in" / "a.h5")
    with h5py.File(src, "a") as f:
        f.create_dataset("sparse", shape=(100,), chunks=(10,), dtype="i4", fillvalue=-1)
        f["sparse"][:25] = 7  # three chunks allocated, seven not
        # _FillValue = the storage fill: the seven stay missing (else stored as -1; issue 9)
        f["sparse"].attrs["_FillValue"] = np.int32(-1)
        ragged = f.create_dataset("ragged", (2,), dtype=h5py.vlen_dtype(np.int32))
        ragged[0], ragged[1] = [1, 2], [3]  # variable-length sequences: skipped
    report = index_many(str(src), str(tmp_path / "out"), executor="serial")
    summary = inspect_refs(report.granules[0].sidecar)
    st = src.stat()
    assert summary.format == "parquet" and summary.sidecar_bytes > 0
    assert summary.source.url == str(src) and summary.source.size == st.st_size
    by = {v.path: v for v in summary.variables}
    with h5py.File(src, "r") as f:
        for name in ("gt1l/heights/h_ph", "gt1l/heights/quality", "grid", "sparse"):
            d, row = f[name], by[name]
            n = d.id.get_num_chunks()
            infos = [d.id.get_chunk_info(i) for i in range(n)]
            assert row.status == "virtual"
            assert (row.shape, row.chunks, row.dtype) == (d.shape, d.chunks, d.dtype.str)
            assert row.n_stored + row.n_inline == n
            assert row.n_missing == row.n_chunks - n
            assert row.stored_bytes + row.inline_bytes == sum(i.size for i in infos)
            assert ("zlib" in row.codecs) == (d.compression == "gzip")
    assert by["sparse"].n_missing == 7
    assert by["ragged"].status == "skipped" and "sequence" in by["ragged"].note
    doc = summary.to_dict()
    assert doc["counts"]["skipped"] == 1 and doc["skipped"][0]["path"] == "ragged"
    assert {v["path"] for v in doc["variables"]} == set(by) - {"ragged"}
