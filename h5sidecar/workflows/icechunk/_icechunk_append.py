"""Append to a datacube held in an Icechunk repository: one commit with only the new references.

The cube's record and members live in the metadata of the branch tip's commit (written by
:func:`~h5sidecar.workflows.write_icechunk`).  An append grows every array with the concat
dimension (its ``zarr.json`` shape only: attributes stay the cube's), sets the new granules'
virtual chunk references after the existing ones, rewrites the inline coordinate, and commits;
the earlier commits stay readable (time travel).  A replaced member's chunk range is rewritten
with its new references (chunks it no longer stores are deleted), which needs its length to be
unchanged: a member whose length changed can only be rebuilt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from h5sidecar.errors import IncompatibleGranulesError
from h5sidecar.references import GranuleRefs, SourceInfo, concat_refs
from h5sidecar.workflows.cube._cube_assemble import CUBE_KEY, cube_record
from h5sidecar.workflows.cube._cube_time import time_of
from h5sidecar.workflows.icechunk._icechunk import _chunk_key, _identities, _set_virtual
from h5sidecar.workflows.icechunk._icechunk_repo import (
    container_prefixes,
    open_icechunk,
    open_repository,
)

if TYPE_CHECKING:
    from h5sidecar.workflows.cube._cube_build import CubePart
    from h5sidecar.workflows.cube._cube_parts import Part

__all__ = ["append_icechunk", "load_state"]

_BRANCH = "main"


def load_state(
    path: str, opts: Mapping[str, Any]
) -> tuple[dict[str, Any], tuple[SourceInfo, ...], dict[str, np.ndarray], dict[str, Any]]:
    """The cube's extra block, members, inline coordinates (raw) and concat coordinate attrs."""
    import zarr

    repo = open_icechunk(path, storage_options=dict(opts) or None)
    tip = next(iter(repo.ancestry(branch=_BRANCH)))
    block = (tip.metadata or {}).get("h5sidecar", {})
    extra = dict(block.get("extra", {}))
    members = tuple(SourceInfo.from_dict(m) for m in block.get("members", []))
    record = extra.get(CUBE_KEY) or {}
    root = zarr.open_group(repo.readonly_session(_BRANCH).store, mode="r")
    names = [record.get("coord"), *record.get("shared", [])] if record.get("coord") else []
    arrays: dict[str, Any] = {c: root[c] for c in names}
    coords = {c: np.asarray(a[...]) for c, a in arrays.items()}
    attrs = dict(arrays[record["coord"]].attrs) if names else {}
    return extra, members, coords, attrs


def _bare(refs: GranuleRefs, held: set[str]) -> GranuleRefs:
    return GranuleRefs(refs.source, refs.groups,
                       {k: a for k, a in refs.arrays.items() if k not in held},
                       refs.skipped, refs.extra, refs.members)  # fmt: skip


def append_icechunk(p: Part, dim: str, opts: Mapping[str, Any]) -> CubePart:
    """Commit ``p``'s new and replacing granules into its repository (see module docstring)."""
    from h5sidecar._compat.fsspec import run_sync
    from h5sidecar.workflows.cube._cube_build import CubePart

    record = p.record
    coord, held = record["coord"], {record["coord"], *record["shared"]}
    starts = p.starts
    slabs: list[tuple[int, GranuleRefs]] = []  # (start along dim, references)
    for k, m in enumerate(p.members):
        g = p.replaced.get(m.url)
        if g is None:
            continue
        if g.values.size != record["lengths"][k]:
            raise IncompatibleGranulesError(
                f"{m.url} changed length along {dim!r} ({record['lengths'][k]} -> "
                f"{g.values.size}); an Icechunk cube can replace a member only in place: rebuild "
                "the cube (mode='build')")
        slabs.append((int(starts[k]), _bare(g.refs, held)))
    if p.new:
        names = [g.refs.source.url for g in p.new]
        tail = concat_refs([_bare(g.refs, held) for g in p.new], dim, names=names)
        slabs.append((int(starts[-1]), tail))
    sources = {g.refs.source.url: g.refs.source for g in [*p.new, *p.replaced.values()]}
    identities: dict[str, Any] = {}
    for _, refs in slabs:
        identities.update(_identities(refs, sources, opts))
    repo = open_repository(p.path, container_prefixes(identities), opts)
    session = repo.writable_session(_BRANCH)
    coordinate = np.concatenate([_replaced_coordinate(p), *(g.values for g in p.new)])
    run_sync(_write, session.store, p, slabs, identities, dim, coordinate)
    members = [p.replaced[m.url].refs.source if m.url in p.replaced else m for m in p.members]
    members += [g.refs.source for g in p.new]
    sidecars = {u: list(s) for u, s in record["sidecars"].items()}
    for g in [*p.new, *p.replaced.values()]:
        if g.stamp is not None:
            sidecars[g.refs.source.url] = list(g.stamp)
    lengths = [*record["lengths"], *(int(g.values.size) for g in p.new)]
    new_record = {**record, **cube_record(
        concat_dim=dim, coord=coord, shared=record["shared"], lengths=lengths,
        encoding=record["encoding"], sidecars=sidecars, order=[m.url for m in members],
        normalized=bool(record.get("normalized_time")))}  # fmt: skip
    metadata = {"h5sidecar": {"source": members[0].to_dict(), "left_out": [], "skipped": [],
                              "extra": {CUBE_KEY: new_record},
                              "members": [m.to_dict() for m in members]}}
    message = (f"h5sidecar cube: append {len(p.new)} granule(s), replace {len(p.replaced)} "
               f"({len(members)} granules)")
    session.commit(message, metadata=metadata)
    return CubePart(path=p.path, granules=tuple(m.url for m in members),
                    length=int(coordinate.size), first=coordinate[0].item(),
                    last=coordinate[-1].item(), **time_of(p.coord_attrs))


def _replaced_coordinate(p: Part) -> np.ndarray:
    out = p.coordinate.copy()
    starts = p.starts
    for k, m in enumerate(p.members):
        if m.url in p.replaced:
            out[starts[k]:starts[k + 1]] = p.replaced[m.url].values
    return out


async def _write(store: Any, p: Part, slabs: list[tuple[int, GranuleRefs]],
                 identities: dict[str, Any], dim: str, coordinate: np.ndarray) -> None:
    from zarr.buffer import default_buffer_prototype

    buffer = default_buffer_prototype().buffer
    coord = p.record["coord"]
    grown = int(coordinate.size)
    docs: dict[str, dict[str, Any]] = {}
    for path in p.paths:
        raw = await store.get(f"{path}/zarr.json", prototype=default_buffer_prototype())
        if raw is not None:  # arrays Icechunk could not hold were left out when built
            docs[path] = json.loads(raw.to_bytes())
    for path, doc in docs.items():
        if path == coord:
            doc["shape"] = [grown]
            doc["chunk_grid"]["configuration"]["chunk_shape"] = [grown]
            dtype = p.coordinate.dtype
            data = np.ascontiguousarray(coordinate, dtype=dtype.newbyteorder("<")).tobytes()
            await store.set(f"{path}/c/0", buffer.from_bytes(data))
        elif dim in (doc.get("dimension_names") or ()):
            axis = list(doc["dimension_names"]).index(dim)
            total = max([doc["shape"][axis], *(s + _length(r, dim) for s, r in slabs)])
            doc["shape"][axis] = total
        else:
            continue
        # the metadata first: Icechunk refuses chunk indices outside the array's shape
        await store.set(f"{path}/zarr.json", buffer.from_bytes(json.dumps(doc).encode()))

    for start, refs in slabs:
        for path, arr in refs.arrays.items():
            if path not in docs or dim not in arr.meta.dimension_names:
                continue
            axis = arr.meta.dimension_names.index(dim)
            step = arr.meta.chunks[axis]
            if start % step:
                raise IncompatibleGranulesError(
                    f"{path} in {p.members[-1].url}, the cube's last member, ends inside a "
                    f"chunk of {step} along {dim!r}, so appended chunks would be misaligned: "
                    "re-chunk that granule or rebuild the cube with it last")
            origin = tuple(start // step if i == axis else 0 for i in range(len(arr.meta.shape)))
            manifest = arr.manifest
            grid = manifest.grid_shape
            codes = manifest.codes.reshape(grid)
            for idx in zip(*np.nonzero(codes == -1), strict=True):  # no longer stored
                await store.delete(_chunk_key(path, _flat(idx, origin, grid), _shifted(grid,
                                                                                     origin)))
            await _set_virtual(store, path, manifest, identities, origin)
            for flat, data in manifest.inline.items():
                idx = np.unravel_index(flat, grid)
                key = "/".join([path, "c", *(str(int(i) + o) for i, o in zip(idx, origin,
                                                                                  strict=True))])
                await store.set(key, buffer.from_bytes(data))


def _length(refs: GranuleRefs, dim: str) -> int:
    for arr in refs.arrays.values():
        if dim in arr.meta.dimension_names:
            return int(arr.meta.shape[arr.meta.dimension_names.index(dim)])
    return 0


def _shifted(grid: tuple[int, ...], origin: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(g + o for g, o in zip(grid, origin, strict=True))


def _flat(idx: tuple[Any, ...], origin: tuple[int, ...], grid: tuple[int, ...]) -> int:
    return int(np.ravel_multi_index(tuple(int(i) + o for i, o in zip(idx, origin, strict=True)),
                                    _shifted(grid, origin)))

