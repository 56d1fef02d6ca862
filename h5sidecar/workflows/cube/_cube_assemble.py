"""Assemble one datacube from ordered pieces, and record what a later append needs.

A piece is a granule's references (subset to the cube's arrays) or a slice of an existing cube
(:func:`~h5sidecar.references.slice_refs`).  The concat coordinate and the shared dimension
coordinates are taken out of the pieces and held inline in the result, so a cube can be cut
and joined again without reading any source.  The cube's ``extra["cube"]`` block records the
members' lengths along the dimension, the encodings every granule had to share, which sidecar
(and which version of it, by size and ETag/mtime) each member came from, and the kept arrays:
an append compares new granules with that record instead of re-reading the old members.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from h5sidecar._version import __version__
from h5sidecar.dest import is_remote
from h5sidecar.errors import (
    H5SidecarError,
    InvalidReferenceError,
    InvalidRequestError,
    SourceReadError,
)
from h5sidecar.references import (
    ArrayRefs,
    ChunkManifest,
    GranuleRefs,
    MemberTable,
    SourceInfo,
    concat_refs,
    inline_array,
    member_identities,
    renamed,
)

__all__ = [
    "COORD_READERS",
    "CUBE_KEY",
    "assemble",
    "cube_record",
    "load_granules",
    "read_coords",
    "read_record",
    "sidecar_stamp",
]

#: Sidecars loaded at the same time (one or two small requests each on an object store).
COORD_READERS = 16
#: ... when every sidecar is a local file: parsing them is CPU work under one interpreter lock,
#: where 16 threads only contend (a cold build of 1000 local sidecars: ~15% faster with 4).
LOCAL_READERS = 4
#: Coordinate reads in flight at once: one small request per granule, all in one batch (at
#: 128 a build of 1000 granules at 20 ms a request is bound by its own CPU, not by latency).
COORD_CONCURRENCY = 128
#: Failed granules a coordinate-read error lists (then "and N more").
_FAILED_SHOWN = 10
#: Key of the cube's record in its references' ``extra`` block.
CUBE_KEY = "cube"
_SHARED_NOTE = "materialized: a coordinate equal in every granule of the cube, held inline"
#: What a record must hold for an append (cubes built before appends existed lack it).
_NEEDED = ("concat_dim", "coord", "shared", "lengths", "encoding", "sidecars")


def sidecar_stamp(path: str, storage_options: Mapping[str, Any] | None) -> str:
    """The current version of a sidecar: size + ETag/mtime of its file (one stat or HEAD).

    For a Parquet sidecar that of its ``.zmetadata``, written last; no content is read.
    """
    from h5sidecar.read import sidecar_identity

    return _stamp(sidecar_identity(path, storage_options, fresh=True))


def _stamp(identity: tuple) -> str:
    _, _, size, stamp, _ = identity
    return f"{size}:{stamp}"


def load_granules(
    items: Sequence[Any], opts: Mapping[str, Any]
) -> list[tuple[GranuleRefs, tuple[str, str] | None]]:
    """Each item's references and, for a sidecar path, ``(path, stamp)`` (stat before load:
    a sidecar rewritten in between gets a stamp that no longer matches, so it is checked again).
    """
    from h5sidecar.read import load_refs, sidecar_identity

    def one(x: Any) -> tuple[GranuleRefs, tuple[str, str] | None]:
        if isinstance(x, GranuleRefs):
            return x, None
        path = os.fspath(x)
        identity = sidecar_identity(path, opts, fresh=True)  # the stamp
        # not through the process-wide sidecar cache: a build reads each sidecar once, and
        # would fill that cache (256 MB by default) with references nobody asks for again
        refs = load_refs(path, opts, identity=identity, cache=None)
        _preload(refs)
        return refs, (path, _stamp(identity))

    local = all(isinstance(x, GranuleRefs) or not is_remote(os.fspath(x)) for x in items)
    with ThreadPoolExecutor(LOCAL_READERS if local else COORD_READERS) as pool:
        return list(pool.map(one, items))


def _preload(refs: GranuleRefs) -> None:
    """Load a lazily read sidecar's manifests file now, in the task that read it (one pass
    over the sidecars instead of two): every array's manifest is cut from it when needed."""
    first = next(iter(refs.arrays.values()), None)
    if first is None or first.manifest_loaded:
        return
    try:
        first.manifest  # noqa: B018 - the access loads it
    except (H5SidecarError, OSError):
        # not cached: loading it again fails again where the failure is reported, naming the
        # granule (read_coords for the coordinates, concat_refs for the other arrays)
        return


def read_coords(parts: Sequence[GranuleRefs], paths: Sequence[str],
                opts: Mapping[str, Any]) -> list[dict[str, np.ndarray]]:
    """``paths`` (1-D arrays) of every part, raw, read in one batch over all parts.

    Every chunk of every part is fetched in one plan (coalesced, run concurrently), with the
    allow-list and each member's freshness guard of a cube
    (:func:`~h5sidecar.read.native._vectors.read_vectors`).  When that fails, the parts' arrays are
    read again, each on its own, to name every granule that fails.

    Raises
    ------
    H5SidecarError or OSError
        The class of the first failure (e.g. :class:`~h5sidecar.errors.StaleReferenceError`),
        its message naming every granule whose coordinates could not be read, and why.
    """
    from h5sidecar.read import member_fetcher, read_vectors, vector_codecs
    from h5sidecar.settings import ReadSettings

    if not parts:
        return []
    failed = _load_manifests(parts, paths)
    if failed:
        raise _failed_reads(parts, failed)
    settings = ReadSettings(max_concurrency=COORD_CONCURRENCY)
    flat = [part.arrays[p] for part in parts for p in paths]
    codecs = vector_codecs(flat)
    if codecs is not None:
        try:
            fetcher = member_fetcher(member_identities(parts), flat, settings, opts)
            values = iter(read_vectors(flat, codecs, fetcher))
        except (H5SidecarError, OSError):
            # read again, each array on its own, to name every granule that fails (only then:
            # one plain batch costs less than one collecting every array's outcome)
            return _read_each(parts, paths, opts, settings)
        return [{p: next(values) for p in paths} for _ in parts]
    return _read_each(parts, paths, opts, settings, collect=False)


def _read_each(parts: Sequence[GranuleRefs], paths: Sequence[str], opts: Mapping[str, Any],
               settings: Any, *, collect: bool = True) -> list[dict[str, np.ndarray]]:
    """The batch reader's way (any array it decodes, through zarr the others): every array
    of every part under ``"<i>/<path>"`` in one reference set whose members are the parts'
    sources; ``collect``: each array on its own, naming every granule that fails."""
    from h5sidecar.read import read_arrays

    arrays = {f"{i}/{p}": renamed(part.arrays[p], f"{i}/{p}")
              for i, part in enumerate(parts) for p in paths}  # fmt: skip
    batch = GranuleRefs(parts[0].source, {}, arrays, members=member_identities(parts))
    if not collect:
        try:
            got = read_arrays(batch, list(arrays), remote_options=opts, settings=settings)
        except (H5SidecarError, OSError):
            return _read_each(parts, paths, opts, settings)
        return [{p: got[f"{i}/{p}"] for p in paths} for i in range(len(parts))]
    got = read_arrays(batch, list(arrays), remote_options=opts, settings=settings,
                      errors="collect")
    if got.errors:  # else every array read the second time (each checked as the first)
        raise _failed_reads(parts, got.errors)
    return [{p: got[f"{i}/{p}"] for p in paths} for i in range(len(parts))]


def _load_manifests(parts: Sequence[GranuleRefs], paths: Sequence[str]
                    ) -> dict[str, BaseException]:
    """Load the manifests of ``paths`` not in memory yet, :data:`COORD_READERS` sidecars at a
    time (one GET each on an object store); ``"<i>/<path>"`` -> error of those that fail."""
    todo = [(i, p) for i, part in enumerate(parts)
            if (p := [q for q in paths if not part.arrays[q].manifest_loaded])]

    def one(item: tuple[int, list[str]]) -> dict[str, BaseException]:
        # a part's arrays in one task: the first loads the sidecar's manifests file, the
        # others are cut from it (tasks of one sidecar would only wait for each other)
        i, todo_paths = item
        out: dict[str, BaseException] = {}
        for p in todo_paths:
            try:
                parts[i].arrays[p].manifest  # noqa: B018 - the access loads it
            except (H5SidecarError, OSError) as exc:  # a sidecar's fault: named by the caller
                out[f"{i}/{p}"] = exc
        return out

    if not todo:
        return {}
    with ThreadPoolExecutor(COORD_READERS) as pool:
        return {k: e for errors in pool.map(one, todo) for k, e in errors.items()}


def _failed_reads(parts: Sequence[GranuleRefs], errors: Mapping[str, BaseException]
                  ) -> BaseException:
    """The first failure's class (callers catch e.g. a stale source by it), naming every
    granule that failed with its reason."""
    failed: dict[int, list[str]] = {}
    for key in errors:
        i, _, path = key.partition("/")
        failed.setdefault(int(i), []).append(path)
    lines = [f"{parts[i].source.url} ({', '.join(ps)}): {errors[f'{i}/{ps[0]}']}"
             for i, ps in sorted(failed.items())]
    shown = "\n  ".join(lines[:_FAILED_SHOWN])
    more = f"\n  and {len(lines) - _FAILED_SHOWN} more" if len(lines) > _FAILED_SHOWN else ""
    first = errors[next(iter(errors))]
    message = (f"could not read the coordinates of {len(lines)} of {len(parts)} granules:\n  "
               f"{shown}{more}")
    try:
        out = copy.copy(first)  # same class and attributes (a source error's ``url``)
    except TypeError:  # a class that cannot be rebuilt from its arguments
        out = SourceReadError(message)
    out.args = (message,)
    out.__cause__ = first
    return out


def cube_record(
    *,
    concat_dim: str,
    coord: str,
    shared: Sequence[str],
    lengths: Sequence[int],
    encoding: Mapping[str, Mapping[str, str]],
    sidecars: Mapping[str, Sequence[str]] | None,
    order: Sequence[str],
    normalized: bool,
    aligned: tuple[Sequence[str | None], Sequence[str | None]] | None = None,
) -> dict[str, Any]:
    """The ``extra["cube"]`` block (see module docstring).

    ``sidecars`` maps member URLs to ``(sidecar path, stamp)``; ``order`` lists the members'
    URLs in cube order.  Sidecars are stored compactly, aligned with the members: a common
    ``root`` and each one's path below it (``None`` for a member given as references).
    ``aligned`` gives those paths and stamps in cube order instead of ``sidecars`` (a build:
    no mapping of every member).
    """
    if aligned is None:
        sidecars = sidecars or {}
        aligned = ([sidecars[u][0] if u in sidecars else None for u in order],
                   [sidecars[u][1] if u in sidecars else None for u in order])
    paths, stamps = aligned
    known = [q for q in paths if q is not None]
    # a string prefix cut at the last "/": commonpath would mangle "s3://" URLs
    root = os.path.commonprefix(known) if known else ""  # noqa: RUF071
    root = root[: root.rfind("/") + 1]
    return {
        "concat_dim": concat_dim,
        "granules": len(lengths),
        "h5sidecar": __version__,
        "coord": coord,
        "shared": list(shared),
        "lengths": [int(n) for n in lengths],
        "encoding": {p: dict(e) for p, e in encoding.items()},
        "sidecars": {"root": root,
                     "paths": [None if q is None else q[len(root):] for q in paths],
                     "stamps": list(stamps)},
        "normalized_time": normalized,
    }


def read_record(
    extra: Mapping[str, Any], where: str, members: Sequence[SourceInfo], *,
    lists: bool = True,
) -> dict[str, Any]:
    """The cube record of ``extra``, its ``sidecars`` as a mapping member URL ->
    ``[path, stamp]``; refuses a cube that lacks what an append needs.

    ``lists=False``: a record whose per-member lists are member columns (a Parquet cube's) is
    given as it is, its columns checked: no object per member is made.
    """
    from h5sidecar.workflows.cube._cube_columns import check_columns, with_lists

    record = extra.get(CUBE_KEY)
    needed: tuple[str, ...] = _NEEDED
    if isinstance(record, Mapping) and not lists and check_columns(record, members, where):
        needed = tuple(k for k in _NEEDED if k != "lengths")  # a member column
    elif isinstance(record, Mapping):  # a Parquet cube's per-member lists are member columns
        record = with_lists(record, members, where)
    if not isinstance(record, Mapping) or any(k not in record for k in needed):
        raise InvalidRequestError(
            f"{where} holds no append record (not a cube, or one built by an older h5sidecar); "
            "build it once without append (mode='build'), then append to it"
        )
    out = dict(record)
    if needed is not _NEEDED:
        return out
    block = record["sidecars"]
    try:
        root, paths, stamps = block["root"], block["paths"], block["stamps"]
        if not len(paths) == len(stamps) == len(members) == len(record["lengths"]):
            raise ValueError("lengths differ")
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidReferenceError(
            f"{where}: malformed cube record ({exc}); build the cube again") from exc
    out["sidecars"] = {m.url: [root + q, s] for m, q, s in zip(members, paths, stamps,
                                                                strict=True) if q is not None}
    return out


def _resized(template: ArrayRefs, n: int, attrs: Mapping[str, Any] | None) -> ArrayRefs:
    """``template`` (a 1-D coordinate) as an empty array of length ``n`` (to be inlined)."""
    meta = replace(template.meta, shape=(n,), chunks=(n,),
                   attrs=dict(template.meta.attrs if attrs is None else attrs))
    return ArrayRefs(template.path, meta, ChunkManifest.empty(meta.grid_shape))


def assemble(
    pieces: Sequence[GranuleRefs],
    names: Sequence[str],
    *,
    paths: Sequence[str],
    coord: str,
    coordinate: np.ndarray,
    templates: Mapping[str, ArrayRefs],
    shared_values: Mapping[str, np.ndarray],
    concat_dim: str,
    record: Mapping[str, Any],
    coord_attrs: Mapping[str, Any] | None = None,
    members: MemberTable | None = None,
) -> GranuleRefs:
    """One cube: ``pieces`` concatenated along ``concat_dim``, coordinates held inline.

    Parameters
    ----------
    pieces, names
        Granules or cube slices in order, and how errors name them.
    paths
        The cube's arrays, in order.
    coord, coordinate
        The concat coordinate's path and its values (the cube's units and dtype).
    templates
        Path -> an :class:`ArrayRefs` of ``coord`` and of each shared coordinate (metadata and
        attributes to keep).
    shared_values
        Values of the shared coordinates.
    record
        The cube record (:func:`cube_record`).
    coord_attrs
        Attributes of the coordinate when they differ from the template's (normalized units).
    members
        The members when the pieces do not hold them (a build's pieces: in columns).
    """
    inlined = {coord, *shared_values}
    bare = [GranuleRefs(p.source, p.groups, {k: a for k, a in p.arrays.items() if k not in inlined},
                        p.skipped, p.extra, p.members) for p in pieces]  # fmt: skip
    if len(bare) == 1 and members is not None:  # one piece (joined by the build): as it is
        one = bare[0]
        cube = GranuleRefs(one.source, one.groups, one.arrays, one.skipped,
                           {CUBE_KEY: dict(record)})
    else:
        cube = concat_refs(bare, concat_dim, names=names, extra={CUBE_KEY: dict(record)})
    held = {coord: inline_array(_resized(templates[coord], coordinate.size, coord_attrs),
                                coordinate)}
    for c, v in shared_values.items():
        held[c] = inline_array(templates[c], v, note=_SHARED_NOTE)
    arrays = {p: held.get(p) or cube.arrays[p] for p in paths}
    chosen = cube.members if members is None else members
    first = chosen[0] if chosen else cube.source
    return GranuleRefs(first, cube.groups, arrays, cube.skipped, cube.extra, chosen)
