"""An append to a Parquet cube (local or on an object store) that writes only what is new
(its tail).

When the new granules go after the cube's members, no member was replaced, and the concat
dimension is the first axis of every concatenated array with whole chunks along it, the new
members' chunks are numbered after the old ones: their references are assembled alone and
written after the old ones
(:func:`~h5sidecar.references.write_parquet_tail`), the old manifests are neither loaded nor
joined.  A member replaced by a granule of the same length along the concat dimension keeps
its chunk numbers: it is replaced in place (its chunks' references written as a manifests part
that supersedes their old rows, its record files and members file written again: see
:class:`~h5sidecar.references.Replacement`), with the new members' tail in the same write.
Anything else is rewritten whole (:func:`why_not_tail` says why), as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar._version import __version__
from h5sidecar.references import (
    MISSING,
    GranuleRefs,
    MemberTable,
    Replacement,
    inline_array,
    tail_refusal,
    write_parquet_tail,
)
from h5sidecar.workflows.cube._cube_assemble import CUBE_KEY, _resized, assemble, cube_record
from h5sidecar.workflows.cube._cube_build import CubePart
from h5sidecar.workflows.cube._cube_columns import as_columns
from h5sidecar.workflows.cube._cube_mark import MARK_KEY, MemberUrls, marked
from h5sidecar.workflows.cube._cube_parts import Granule, Part
from h5sidecar.workflows.cube._cube_time import time_of

__all__ = ["append_tail", "why_not_tail"]


def why_not_tail(p: Part, dim: str, opts: Mapping[str, Any] | None = None) -> str:
    """Why ``p``'s append must rewrite the cube ('' when only its tail is written, and its
    replaced members in place); ``opts``: the fsspec options of a cube on an object store."""
    assert p.refs is not None
    held = {p.record["coord"], *p.record["shared"]}
    for a, arr in p.refs.arrays.items():
        if a in held:
            continue
        meta = arr.meta
        if not meta.dimension_names or meta.dimension_names[0] != dim:
            return f"{a}'s first dimension is not {dim!r}"
        if meta.shape[0] % meta.chunks[0]:
            return f"{a}'s last chunk along {dim!r} is partial"
    why = _why_not_in_place(p) if p.replaced else ""
    if why:
        return f"members were replaced ({why})"
    root = _root(p)
    if any(g.stamp is not None and not g.stamp[0].startswith(root)
           for g in [*p.new, *p.replaced.values()]):
        return f"new sidecars are not under the cube's sidecar folder {root}"
    return tail_refusal(p.path, [a for a in p.refs.arrays if a not in held], opts)


def _why_not_in_place(p: Part) -> str:
    """Why ``p``'s replaced members cannot be replaced in place ('' when they can): each new
    granule must span as many steps as the member it replaces (so the same chunks, whole
    along the dimension) and have every chunk of each concatenated array (a missing one
    would have no row to supersede the old one's).  A granule chunked otherwise was refused
    before (another encoding, see ``_cube_append._place``)."""
    assert p.refs is not None
    held = {p.record["coord"], *p.record["shared"]}
    lengths, starts = p.lengths, p.starts
    for row, g in _replaced(p):
        url, n = g.refs.source.url, int(lengths[row])
        if g.values.size != n:
            return f"{url} now spans {g.values.size} steps, not {n}"
        for a, arr in p.refs.arrays.items():
            if a in held:
                continue
            c0, mine = arr.meta.chunks[0], g.refs.arrays.get(a)
            if starts[row] % c0 or n % c0:
                return f"{a}'s chunks along its first axis span two members"
            if mine is None or (mine.manifest.codes == MISSING).any():
                return f"{url} lacks chunks of {a}"
    return ""


def _replaced(p: Part) -> list[tuple[int, Granule]]:
    """``p``'s replaced members' rows and new granules, in cube order (rows looked up)."""
    urls = list(p.replaced)
    rows = p.members.rows_of("url", pa.array(urls, pa.string())).tolist()
    return sorted(((r, p.replaced[u]) for r, u in zip(rows, urls, strict=True)),
                  key=lambda x: x[0])


def append_tail(p: Part, dim: str, opts: Mapping[str, Any]) -> CubePart:
    """Write ``p.new`` after the cube's members, and ``p.replaced`` in place (check
    :func:`why_not_tail` first)."""
    assert p.refs is not None
    coord = p.record["coord"]
    held = {coord, *p.record["shared"]}
    old = p.refs.arrays
    before = _members(p.refs.members)  # (its members files read only as looked up)
    coordinate = p.coordinate
    replacements = []
    if p.replaced:  # their chunks keep their numbers: C order, the dimension first
        coordinate = coordinate.copy()
        starts_at = p.starts
        for row, g in _replaced(p):
            piece, rows = _fragment(p, dim, [g], g.values, before.schema)
            a0, a1 = int(starts_at[row]), int(starts_at[row + 1])
            coordinate[a0:a1] = g.values
            first = {a: a0 // old[a].meta.chunks[0] * math.prod(old[a].meta.grid_shape[1:])
                     for a in old if a not in held}
            replacements.append(Replacement(row, rows, GranuleRefs(
                piece.source, piece.groups, {a: piece.arrays[a] for a in first}), first))
    starts: dict[str, int] = {}
    lengths: dict[str, int] = {}
    added = before.schema.empty_table()
    arrays = {}
    if p.new:
        values = np.concatenate([g.values for g in p.new]).astype(coordinate.dtype, copy=False)
        frag, added = _fragment(p, dim, p.new, values, before.schema)
        coordinate = np.concatenate([coordinate, values])
        arrays = {a: frag.arrays[a] for a in old if a not in held}
        starts = {a: math.prod(old[a].meta.grid_shape) for a in arrays}
        lengths = {a: old[a].meta.shape[0] + frag.arrays[a].meta.shape[0] for a in starts}
    arrays[coord] = inline_array(_resized(old[coord], coordinate.size, None), coordinate)
    tail = GranuleRefs(p.refs.source, p.refs.groups, arrays)
    members = _After(before, added)
    cube = dict(p.refs.extra[CUBE_KEY])
    cube.update(granules=len(members), h5sidecar=__version__)
    marked(cube, p.record.get(MARK_KEY), coordinate)  # DEST's record mark (see _cube_mark)
    # only the new members: the cube's members files but its last are kept
    write_parquet_tail(p.path, tail, starts=starts, lengths=lengths,
                       members=MemberTable(added), extra={**p.refs.extra, CUBE_KEY: cube},
                       replacements=replacements, storage_options=opts)
    return CubePart(path=p.path, granules=MemberUrls(members),  # no string per member
                    length=int(coordinate.size), first=coordinate[0].item(),
                    last=coordinate[-1].item(), **time_of(p.coord_attrs))


def _fragment(p: Part, dim: str, grans: list[Granule], values: np.ndarray, schema: pa.Schema
              ) -> tuple[GranuleRefs, pa.Table]:
    """``grans`` concatenated alone (each array's chunks numbered from 0), and their rows of
    the cube's members files (``schema``'s columns)."""
    assert p.refs is not None
    coord, shared = p.record["coord"], p.record["shared"]
    urls = [g.refs.source.url for g in grans]
    record = cube_record(
        concat_dim=dim, coord=coord, shared=shared, lengths=[g.values.size for g in grans],
        encoding=p.record["encoding"],
        sidecars={g.refs.source.url: g.stamp for g in grans if g.stamp is not None},
        order=urls, normalized=bool(p.record.get("normalized_time")))  # fmt: skip
    record, table = as_columns(record, [g.refs.source for g in grans])
    # their sidecar paths below the cube's root (as_columns cuts at their own)
    full = pa.array([None if g.stamp is None else g.stamp[0] for g in grans], pa.string())
    table = table.with_columns({"sidecar": pc.utf8_slice_codeunits(full, len(_root(p)))})
    templates = {c: p.refs.arrays[c] for c in (coord, *shared)}
    frag = assemble([g.refs for g in grans], urls, paths=list(p.refs.arrays), coord=coord,
                    coordinate=values, templates=templates, shared_values=p.shared,
                    concat_dim=dim, record=record, members=table)
    return frag, table.table.select(schema.names).cast(schema)


class _After:
    """The members after a tail append: the cube's, then the new ones (their URLs joined
    only when asked for: :class:`~h5sidecar.workflows.cube._cube_mark.MemberUrls`)."""

    __slots__ = ("added", "before")

    def __init__(self, before: MemberTable, added: pa.Table) -> None:
        self.before, self.added = before, added

    def __len__(self) -> int:
        return len(self.before) + self.added.num_rows

    @property
    def urls(self) -> pa.ChunkedArray:
        return pa.chunked_array([*self.before.urls.chunks, *self.added.column("url").chunks],
                                pa.string())


def _members(members: Any) -> MemberTable:
    return members if isinstance(members, MemberTable) else MemberTable.of(members)


def _root(p: Part) -> str:
    """The folder the cube's record names its members' sidecars below."""
    assert p.refs is not None
    return str(p.refs.extra[CUBE_KEY]["sidecars"]["root"])
