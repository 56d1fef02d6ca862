"""An append to a local Parquet cube that writes only what is new (its tail).

When the new granules go after the cube's members, no member was replaced, and the concat
dimension is the first axis of every concatenated array with whole chunks along it, the new
members' chunks are numbered after the old ones: their references are assembled alone and
written after the old ones
(:func:`~h5sidecar.references.write_parquet_tail`), the old manifests are neither loaded nor
joined.  Anything else is rewritten whole (:func:`tail_refusal` says why), as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar._version import __version__
from h5sidecar.dest import is_remote
from h5sidecar.references import MemberTable, inline_array, tail_refusal, write_parquet_tail
from h5sidecar.workflows.cube._cube_assemble import CUBE_KEY, _resized, assemble, cube_record
from h5sidecar.workflows.cube._cube_build import CubePart
from h5sidecar.workflows.cube._cube_columns import as_columns
from h5sidecar.workflows.cube._cube_mark import MARK_KEY, MemberUrls, marked
from h5sidecar.workflows.cube._cube_parts import Part
from h5sidecar.workflows.cube._cube_time import time_of

__all__ = ["append_tail", "why_not_tail"]


def why_not_tail(p: Part, dim: str) -> str:
    """Why ``p``'s append must rewrite the cube ('' when only its tail is written)."""
    if p.replaced:
        return "members were replaced"
    if is_remote(p.path):
        return "the cube is on an object store"
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
    root = _root(p)
    if any(g.stamp is not None and not g.stamp[0].startswith(root) for g in p.new):
        return f"new sidecars are not under the cube's sidecar folder {root}"
    return tail_refusal(p.path, [a for a in p.refs.arrays if a not in held])


def append_tail(p: Part, dim: str, opts: Mapping[str, Any]) -> CubePart:
    """Write ``p.new`` after the cube's members (check :func:`why_not_tail` first)."""
    assert p.refs is not None
    coord, shared = p.record["coord"], p.record["shared"]
    held = {coord, *shared}
    new_urls = [g.refs.source.url for g in p.new]
    values = np.concatenate([g.values for g in p.new]).astype(p.coordinate.dtype, copy=False)
    record = cube_record(
        concat_dim=dim, coord=coord, shared=shared, lengths=[g.values.size for g in p.new],
        encoding=p.record["encoding"],
        sidecars={g.refs.source.url: g.stamp for g in p.new if g.stamp is not None},
        order=new_urls, normalized=bool(p.record.get("normalized_time")))  # fmt: skip
    record, table = as_columns(record, [g.refs.source for g in p.new])
    # the new members' sidecar paths below the cube's root (as_columns cuts at their own)
    root = _root(p)
    full = pa.array([None if g.stamp is None else g.stamp[0] for g in p.new], pa.string())
    table = table.with_columns({"sidecar": pc.utf8_slice_codeunits(full, len(root))})
    templates = {c: p.refs.arrays[c] for c in held}
    frag = assemble([g.refs for g in p.new], new_urls, paths=list(p.refs.arrays), coord=coord,
                    coordinate=values, templates=templates, shared_values=p.shared,
                    concat_dim=dim, record=record, members=table)
    coordinate = np.concatenate([p.coordinate, values])
    arrays = {a: frag.arrays[a] for a in p.refs.arrays if a not in held}
    arrays[coord] = inline_array(_resized(templates[coord], coordinate.size, None), coordinate)
    tail = type(frag)(frag.source, frag.groups, arrays, frag.skipped, frag.extra, frag.members)
    old = p.refs.arrays
    starts = {a: math.prod(old[a].meta.grid_shape) for a in arrays if a != coord}
    lengths = {a: old[a].meta.shape[0] + frag.arrays[a].meta.shape[0] for a in starts}
    before = _members(p.refs.members)  # (its members files read only as looked up)
    added = table.table.select(before.schema.names).cast(before.schema)
    members = _After(before, added)
    cube = dict(p.refs.extra[CUBE_KEY])
    cube.update(granules=len(members), h5sidecar=__version__)
    marked(cube, p.record.get(MARK_KEY), coordinate)  # DEST's record mark (see _cube_mark)
    # only the new members: the cube's members files but its last are kept
    write_parquet_tail(p.path, tail, starts=starts, lengths=lengths,
                       members=MemberTable(added), extra={**p.refs.extra, CUBE_KEY: cube})
    return CubePart(path=p.path, granules=MemberUrls(members),  # no string per member
                    length=int(coordinate.size), first=coordinate[0].item(),
                    last=coordinate[-1].item(), **time_of(p.coord_attrs))


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
