"""A build's pieces on disk between its scan and its write, joined once into whole grids.

Each batch of a build folds its granules into a piece (:mod:`._cube_batches`); held until the
end, the pieces' joined manifests, one URL tuple per array and piece, and then their
concatenation (a second copy of every grid, and a dict of every member's URL per array) grew
the build by ~0.6 KB a member.  Now a piece's concatenated arrays are written to an Arrow IPC
file in a staging folder as soon as the piece is made (beside the output when it is local,
named as an atomic write's temporaries, which DEST's walk skips): one row an array, its
manifest's columns typed (no pickled objects to trust), read back memory-mapped.
:func:`join_staged` fills each array's whole chunk grid (codes, offsets,
lengths: a few bytes a chunk) one piece at a time.  The chunk URLs are the members' URLs, in
member order, one tuple shared by every array: no string is made per member and array.

What the pieces join to is what :func:`~h5sidecar.references.concat_refs` gives (the same
checks, errors and manifests), so the cube written does not change.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Self

import numpy as np
import pyarrow as pa

from h5sidecar.dest import is_remote
from h5sidecar.references import (
    ArrayMeta,
    ArrayRefs,
    ChunkManifest,
    GranuleRefs,
    UrlColumn,
    check_shared_meta,
    concat_meta,
)

__all__ = ["Staging", "StagedRefs", "join_staged"]


@dataclass(frozen=True, slots=True)
class StagedRefs:
    """A piece whose concatenated arrays are in ``file``: the rest of its references, and the
    metadata of those arrays (checked and joined before any grid is read back)."""

    rest: GranuleRefs  # source, groups, skipped, extra and the arrays without the dimension
    metas: dict[str, ArrayMeta]  # the staged arrays' metadata
    order: tuple[str, ...]  # every array's path, in the references' order
    file: str

    def load(self) -> dict[str, ArrayRefs]:
        """The staged arrays (their grids memory-mapped from the file)."""
        with pa.memory_map(self.file) as source:
            rows = pa.ipc.open_file(source).read_all()
        return {path: _array(rows, i, self.metas[path])
                for i, path in enumerate(rows.column("path").to_pylist())}


#: One row a staged array: its chunk manifest's columns flattened (the grid's shape is its
#: metadata's), its URLs and inline chunks, and what else :class:`ArrayRefs` holds.
_SCHEMA = pa.schema([
    ("path", pa.string()), ("urls", pa.list_(pa.string())),
    ("codes", pa.large_list(pa.int32())), ("offsets", pa.large_list(pa.uint64())),
    ("lengths", pa.large_list(pa.uint64())), ("checksums", pa.large_list(pa.uint64())),
    ("inline_at", pa.large_list(pa.int64())), ("inline", pa.large_list(pa.large_binary())),
    ("status", pa.string()), ("note", pa.string()),
])  # fmt: skip


def _rows(arrays: Sequence[ArrayRefs]) -> pa.Table:
    """``arrays`` as rows of :data:`_SCHEMA`."""
    ms = [a.manifest for a in arrays]
    return pa.Table.from_pydict({
        "path": [a.path for a in arrays],
        "urls": [list(m.urls) for m in ms],
        "codes": [m.codes.reshape(-1) for m in ms],
        "offsets": [m.offsets.reshape(-1) for m in ms],
        "lengths": [m.lengths.reshape(-1) for m in ms],
        "checksums": [None if a.checksums is None else a.checksums.reshape(-1) for a in arrays],
        "inline_at": [np.fromiter(m.inline, np.int64, len(m.inline)) for m in ms],
        "inline": [list(m.inline.values()) for m in ms],
        "status": [a.status for a in arrays],
        "note": [a.note for a in arrays],
    }, schema=_SCHEMA)  # fmt: skip


def _column(rows: pa.Table, name: str, i: int, shape: tuple[int, ...]) -> np.ndarray:
    values = rows.column(name)[i].values  # no copy: a view of the mapped file
    return values.to_numpy(zero_copy_only=True).reshape(shape)


def _array(rows: pa.Table, i: int, meta: ArrayMeta) -> ArrayRefs:
    """Row ``i`` of ``rows`` as the array it was (with its metadata ``meta``)."""
    grid = meta.grid_shape
    inline = dict(zip(rows.column("inline_at")[i].values.to_pylist(),
                      rows.column("inline")[i].values.to_pylist(), strict=True))
    manifest = ChunkManifest.from_checked(
        urls=tuple(rows.column("urls")[i].values.to_pylist()),
        codes=_column(rows, "codes", i, grid), offsets=_column(rows, "offsets", i, grid),
        lengths=_column(rows, "lengths", i, grid), inline=inline)
    sums = None if not rows.column("checksums")[i].is_valid else \
        _column(rows, "checksums", i, grid)
    return ArrayRefs(path=rows.column("path")[i].as_py(), meta=meta, manifest=manifest,
                     status=rows.column("status")[i].as_py(), note=rows.column("note")[i].as_py(),
                     checksums=sums)


class Staging:
    """A staging folder for one build's pieces (removed by :meth:`close`)."""

    def __init__(self, out: str) -> None:
        where = None if is_remote(out) else os.path.dirname(os.path.abspath(out))
        if where is not None and not os.path.isdir(where):  # made by the write, not here
            where = None
        base = os.path.basename(out.rstrip("/")) or "cube"
        # named as an atomic write's temporaries (".NAME.*.tmp"): hidden from DEST's walk
        self.folder = tempfile.mkdtemp(dir=where, prefix=f".{base}.pieces.", suffix=".tmp")
        self._count = 0

    def stage(self, refs: GranuleRefs, dim: str) -> StagedRefs:
        """Write ``refs``' arrays with the dimension ``dim`` to a file of their own."""
        staged = {p: a for p, a in refs.arrays.items() if dim in a.meta.dimension_names}
        path = os.path.join(self.folder, f"{self._count}.arrow")
        self._count += 1
        rows = _rows(list(staged.values()))
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
            writer.write_table(rows)
        rest = GranuleRefs(refs.source, refs.groups,
                           {p: a for p, a in refs.arrays.items() if p not in staged},
                           refs.skipped, refs.extra)  # fmt: skip
        return StagedRefs(rest, {p: a.meta for p, a in staged.items()}, tuple(refs.arrays),
                          path)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Grid:
    """One joined array's chunk grid, filled a piece at a time."""

    def __init__(self, meta: ArrayMeta, axis: int) -> None:
        grid = meta.grid_shape
        self.meta, self.axis, self.at = meta, axis, 0
        self.codes = np.empty(grid, np.int32)
        self.offsets = np.empty(grid, np.uint64)
        self.lengths = np.empty(grid, np.uint64)
        self.sums: np.ndarray | None = np.empty(grid, np.uint64)
        self.inline: dict[int, bytes] = {}
        self.status: Literal["virtual", "inlined"] = "inlined"
        self.note: str | None = None

    def put(self, arr: ArrayRefs, urls: np.ndarray) -> None:
        """Place ``arr`` (the next piece's) after the pieces placed; ``urls``: the global
        index of each of its manifest's URLs."""
        m, axis = arr.manifest, self.axis
        step = m.grid_shape[axis]
        index = (slice(None),) * axis + (slice(self.at, self.at + step),)
        c = m.codes
        self.codes[index] = np.where(c >= 0, urls[np.clip(c, 0, None)], c)
        self.offsets[index] = m.offsets
        self.lengths[index] = m.lengths
        if self.sums is not None and arr.checksums is not None:
            self.sums[index] = arr.checksums
        else:
            self.sums = None  # as concat_refs: checksums only when every piece has them
        if m.inline:
            flat = np.fromiter(m.inline, dtype=np.int64, count=len(m.inline))
            where = list(np.unravel_index(flat, m.grid_shape))
            where[axis] = where[axis] + self.at
            moved = np.ravel_multi_index(tuple(where), self.codes.shape)
            self.inline.update(zip(moved.tolist(), m.inline.values(), strict=True))
        self.at += step
        if arr.status == "virtual":
            self.status = "virtual"
        if self.note is None:
            self.note = arr.note

    def refs(self, path: str, table: Sequence[str]) -> ArrayRefs:
        """The joined array; its URLs ``table`` (shared), compacted when some are unused."""
        used = np.unique(self.codes[self.codes >= 0])
        urls, codes = table, self.codes
        if used.size != len(table):  # a member without a stored chunk of this array
            remap = np.full(len(table) or 1, -1, np.int32)
            remap[used] = np.arange(used.size, dtype=np.int32)
            codes = np.where(codes >= 0, remap[np.clip(codes, 0, None)], codes)
            urls = (table.take(used) if isinstance(table, UrlColumn)
                    else tuple(table[i] for i in used.tolist()))
        manifest = ChunkManifest.from_checked(urls=urls, codes=codes, offsets=self.offsets,
                                              lengths=self.lengths, inline=self.inline)
        return ArrayRefs(path=path, meta=self.meta, manifest=manifest, status=self.status,
                         note=self.note or "", checksums=self.sums)


def join_staged(pieces: Sequence[StagedRefs], names: Sequence[Sequence[str]],
                dim: str, *, order: Sequence[str] | None = None) -> GranuleRefs:
    """The pieces concatenated along ``dim`` (as :func:`~h5sidecar.references.concat_refs`
    of their references, without members), reading one piece's file at a time.

    ``names``: each piece's members' URLs in order (its chunks' URLs); errors name a piece by
    its last member, as a build names it.  ``order``: every piece's ``names`` in one tuple,
    then the URL table of the arrays (when no chunk names another URL), not a copy of it.
    """
    labels = [n[-1] for n in names]
    first = pieces[0]
    for path in first.order:
        if path not in first.metas:
            check_shared_meta(path, [p.rest.arrays[path].meta for p in pieces], labels, dim)
    grids: dict[str, _Grid] = {}
    for path in first.metas:
        meta = concat_meta(path, [p.metas[path] for p in pieces], labels, dim)
        grids[path] = _Grid(meta, meta.dimension_names.index(dim))
    total = sum(len(n) for n in names)
    others: dict[str, int] = {}  # chunk URLs that are no member's (none in practice)
    start = 0
    for piece, members in zip(pieces, names, strict=True):
        position = {u: start + i for i, u in enumerate(members)}
        for path, arr in piece.load().items():
            urls = np.array([position[u] if u in position else
                             total + others.setdefault(u, len(others)) for u in arr.manifest.urls]
                            or [0], np.int32)  # fmt: skip
            grids[path].put(arr, urls)
        start += len(members)
    table: Sequence[str] = (order if order is not None and not others
                              else (*(u for n in names for u in n), *others))
    arrays: dict[str, Any] = {}
    for path in first.order:
        arrays[path] = grids[path].refs(path, table) if path in grids else first.rest.arrays[path]
    rest = first.rest
    return GranuleRefs(rest.source, rest.groups, arrays, rest.skipped, rest.extra)
