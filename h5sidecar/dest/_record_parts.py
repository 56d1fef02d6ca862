"""The record of an object-store DEST: append-only Parquet parts, ``DEST/_h5sidecar_record/``.

An object store cannot host the SQLite record of a local DEST (no locks, no appends, no
partial rewrites), and one ``_report.json`` rewritten by every run costs O(N) per run and
loses a killed run's rows.  So a run writes what it recorded since its last write as one new
Parquet object, a *part*, every few granules and at its end: one PUT each, atomic on every
object store, so a run killed at any moment loses at most its unwritten rows and leaves no
half part; two runs never write the same object, so neither loses the other's rows.

A row is one granule's result keyed by its source URL, with ``key``: the name of the part it
was first written in (``part-<ns since epoch, 20 digits>-<uuid>``).  The row with the largest
key wins (the newest write); a ``deleted`` row (a tombstone, written by prune) removes the
granule.  Rows keep their key when a compaction copies them into a new part, so a compacted
part never outranks a concurrent run's newer row, whatever the part's own name.

Each part's Parquet metadata holds (under :data:`META_KEY`) the headers of the runs it writes
for (a run's latest header is the one with the largest ``key``) and the source roots.

This module knows the format and its I/O only (pyarrow, fsspec); :mod:`._record_store` turns
parts into an SQLite database for lookups and reports (the record cache), from which the gateway
and the catalog read the newest status of each granule; :func:`latest_rows` reads it from every
part where there is no cache.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = [
    "META_KEY",
    "PARTS_DIR",
    "SCHEMA",
    "list_parts",
    "latest_rows",
    "part_key",
    "part_meta",
    "read_batches",
    "write_part",
]

#: Folder of the parts under DEST (a leading ``_``: listings of sidecars skip it).
PARTS_DIR = "_h5sidecar_record"
#: Key of the parts' own metadata in the Parquet file's key-value metadata.
META_KEY = b"h5sidecar_record"
FORMAT_VERSION = 1
_SUFFIX = ".parquet"
#: Times a reader lists the parts again when a compaction removed one it was about to read.
_RELISTS = 5

_STR = pa.string()
_INT = pa.int64()
SCHEMA = pa.schema([
    ("key", _STR), ("url", _STR), ("name", _STR), ("sidecar", _STR), ("status", _STR),
    ("source", _STR), ("source_url", _STR), ("n_virtual", _INT), ("n_inlined", _INT),
    ("n_skipped", _INT), ("skipped", _STR), ("n_chunks", _INT), ("sidecar_bytes", _INT),
    ("seconds", _STR), ("error", _STR), ("run", _STR), ("deleted", pa.bool_()),
])


def part_key(*, base: bool = False) -> str:
    """A new part's key (its file name without suffix): later keys sort after earlier ones;
    ``base`` gives the oldest possible key (a migrated ``_report.json``)."""
    ns = 0 if base else time.time_ns()
    return f"part-{ns:020d}-{uuid.uuid4().hex}"


def parts_root(root: str) -> str:
    """The parts' folder under the DEST path ``root`` (no scheme)."""
    return f"{root.rstrip('/')}/{PARTS_DIR}"


def list_parts(fs: Any, root: str) -> list[str]:
    """Paths of DEST's parts, sorted (oldest key first); empty when it has none."""
    folder = parts_root(root)
    fs.invalidate_cache(folder)
    try:
        entries = fs.ls(folder, detail=False)
    except FileNotFoundError:
        return []
    return sorted(str(p) for p in entries if str(p).endswith(_SUFFIX))


def write_part(fs: Any, root: str, key: str, table: pa.Table, meta: Mapping[str, Any]) -> str:
    """Write ``table`` (of :data:`SCHEMA`) with ``meta`` as the part ``key``: one object, made
    visible whole by one PUT (or one completed multipart upload); returns its path."""
    path = f"{parts_root(root)}/{key}{_SUFFIX}"
    doc = {"format": FORMAT_VERSION, **meta}
    table = table.replace_schema_metadata({META_KEY: json.dumps(doc).encode()})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    fs.pipe_file(path, sink.getvalue().to_pybytes())
    return path


def part_meta(pf: pq.ParquetFile) -> dict[str, Any]:
    """The part's own metadata (runs, roots)."""
    raw = (pf.schema_arrow.metadata or {}).get(META_KEY)
    return {} if raw is None else dict(json.loads(raw))


@contextlib.contextmanager
def open_part(fs: Any, path: str) -> Iterator[pq.ParquetFile]:
    """The part at ``path`` opened for reading (ranged reads: what it holds is not read whole).

    Raises FileNotFoundError when a compaction removed it since it was listed."""
    with fs.open(path, "rb") as f:
        yield pq.ParquetFile(f)


def read_batches(fs: Any, root: str, columns: Sequence[str] | None = None,
                 batch_size: int = 20_000
                 ) -> Iterator[tuple[str, dict[str, Any], Iterator[pa.RecordBatch]]]:
    """Every part of DEST as ``(path, metadata, batches of rows)``, one part at a time.

    A part removed by a concurrent compaction between the listing and its read is skipped and
    the parts are listed again: the compacted part, written before any part it covers is
    removed, then holds its rows (rows read twice are the same rows, with the same key).
    """
    done: set[str] = set()
    for _ in range(_RELISTS):
        missed = False
        for path in list_parts(fs, root):
            if path in done:
                continue
            try:
                with open_part(fs, path) as pf:
                    yield path, part_meta(pf), pf.iter_batches(batch_size, columns=columns)
            except FileNotFoundError:
                missed = True
                continue
            done.add(path)
        if not missed:
            return
    raise FileNotFoundError(f"the parts of {parts_root(root)} kept vanishing while read "
                            "(compactions running): read again")


def latest_rows(fs: Any, root: str, columns: Sequence[str]) -> pa.Table | None:
    """The newest row of every granule recorded in DEST's parts (tombstoned granules left out),
    with ``columns``, as one columnar table (no Python object per row); None without parts.

    Used where a few columns of every granule are needed at once (the gateway's allowed
    sources, the catalog's failed granules).
    """
    wanted = list(dict.fromkeys(["url", "key", "deleted", *columns]))
    schema = pa.schema([SCHEMA.field(c) for c in wanted])
    tables = [pa.Table.from_batches(list(batches), schema=schema)
              for _, _, batches in read_batches(fs, root, wanted)]
    if not tables:
        return None
    table = pa.concat_tables(tables).sort_by([("url", "ascending"), ("key", "descending")])
    if table.num_rows == 0:
        return table.select(list(columns))
    urls = table["url"].combine_chunks()
    # sorted by URL, newest first: the first row of each URL is its newest
    newest = pa.concat_arrays([pa.array([True]), pc.not_equal(urls[1:], urls[:-1])])
    table = table.filter(newest)
    return table.filter(pc.invert(table["deleted"])).select(list(columns))


def roots_of(fs: Any, root: str) -> tuple[str, ...]:
    """The source roots every part records, oldest first."""
    out: dict[str, None] = {}
    for _, meta, _ in read_batches(fs, root, ["key"]):
        out.update(dict.fromkeys(meta.get("roots", ())))
    return tuple(out)
