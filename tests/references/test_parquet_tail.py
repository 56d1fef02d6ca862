"""The record files of an append's tail: the old last partial record's rows read back (or
missing rows where it has no file) and the new ones after them are the records a whole write
of the array gives."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from h5sidecar.references import INLINE, MISSING, ChunkManifest
from h5sidecar.references.datacube._url_column import arrow_urls
from h5sidecar.references.parquet_sidecar._kerchunk_parquet import record_path
from h5sidecar.references.parquet_sidecar._parquet_tail import _Dir, _old_rows
from h5sidecar.references.parquet_sidecar._parquet_write import record_tables, smallest_file

URLS = ("s3://bucket/a.h5", "s3://bucket/b.h5")


def _manifest(codes: np.ndarray, offsets: np.ndarray, first: int = 0) -> ChunkManifest:
    inline = {i: bytes([first + i]) for i in np.flatnonzero(codes == INLINE).tolist()}
    lengths = np.where(codes >= 0, 8, 0).astype(np.uint64)
    return ChunkManifest.from_arrays(urls=URLS, codes=codes, offsets=offsets,
                                     lengths=lengths, inline=inline)


@pytest.mark.parametrize("seed", range(20))
def test_tail_records_are_the_whole_arrays(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, rs = int(rng.integers(5, 30)), int(rng.integers(2, 6))
    split = int(rng.integers(1, n))
    # runs of missing chunks make records without a file
    codes = rng.choice([MISSING, MISSING, MISSING, 0, 1, INLINE], n).astype(np.int32)
    offsets = np.where(codes >= 0, rng.integers(0, 1000, n), 0).astype(np.uint64)
    whole = {r: t.to_pylist() for r, t in record_tables(_manifest(codes, offsets), rs,
                                                         arrow_urls(URLS))}
    old = _manifest(codes[:split], offsets[:split])
    for r, t in record_tables(old, rs, arrow_urls(URLS)):  # the cube before the append
        path = tmp_path / record_path("v", r)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(smallest_file(t))
    tail = _manifest(codes[split:], offsets[split:], first=split)
    got = {}
    for r, t in record_tables(tail, rs, arrow_urls(URLS), split):
        if r == split // rs and split % rs:
            head = _old_rows(_Dir(tmp_path), record_path("v", r), split % rs, t.schema)
            t = pa.concat_tables([head, t])
        got[r] = pq.read_table(io.BytesIO(smallest_file(t))).to_pylist()
    for r in range(split // rs, -(-n // rs)):
        if r in whole:
            assert got[r] == whole[r], r
        else:  # all missing: no file, or (the first, rewritten) one of missing rows only
            assert all(row["path"] is None and row["raw"] is None for row in got.get(r, []))
