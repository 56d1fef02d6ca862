"""A cube build's pass over its granules, :data:`BATCH` sidecars at a time (bounded memory).

A loaded sidecar is ~40 KB of Python objects (groups, attributes, metadata, manifests); held
all at once that is 40 GB at a million granules.  So the granules are loaded, checked and
folded a batch at a time: each batch's granules of one encoding are concatenated, in coordinate
order, into one *piece* (:func:`~h5sidecar.references.concat_refs`: the chunk manifests joined
into a few arrays), and only the pieces, one template granule per encoding and a few values per
granule (name, sidecar stamp, coordinate values, its source identity in columns:
:class:`~h5sidecar.references.MemberTable`) outlive the batch.

Pieces are joined at the end in coordinate order.  That needs each encoding's pieces not to
interleave along the coordinate, which holds when the sidecars are listed in coordinate order
(DEST is listed by name, and granule names carry their date); when they do not,
:class:`Interleaved` carries every granule's place and the pass is run again in that order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from h5sidecar.errors import IncompatibleGranulesError, InvalidRequestError
from h5sidecar.references import ArrayRefs, GranuleRefs, MemberTable, concat_refs
from h5sidecar.workflows.cube._cube_assemble import load_granules, read_coords
from h5sidecar.workflows.cube._cube_checks import (
    check_order,
    check_shared_values,
    encoding_diff,
    encoding_groups,
    encoding_key,
    encodings,
)
from h5sidecar.workflows.cube._cube_staging import StagedRefs, Staging
from h5sidecar.workflows.cube._cube_time import NORMALIZED_FIELDS

__all__ = ["BATCH", "Encoding", "Interleaved", "Piece", "Scan", "scan"]

#: Sidecars loaded and folded into the cube at a time: what a build holds of the granules
#: themselves (~40 KB each) beyond the cube's own manifests and a few values per granule.
BATCH = 2000


@dataclass
class Piece:
    """A batch's granules of one encoding, concatenated in coordinate order."""

    #: their references joined (but the inlined coordinates), no members; staged on disk
    #: when the pass has a staging folder (see :mod:`._cube_staging`)
    refs: GranuleRefs | StagedRefs
    members: MemberTable  # their source identities
    #: their names (source URLs) in one Arrow column (a Python string each, made amid a batch's
    #: transient objects and held to the end, kept the interpreter's memory from being reused),
    #: the members' URL column itself when equal
    names: pa.Array
    stamps: np.ndarray  # each one's sidecar stamp (bytes; b"" for references given as such)
    coordinate: np.ndarray  # their coordinate values joined
    lengths: np.ndarray  # each one's length along the dimension
    items: np.ndarray  # each one's index in the items of the pass

    @property
    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Each granule's first and last coordinate value."""
        ends = np.cumsum(self.lengths)
        return self.coordinate[ends - self.lengths], self.coordinate[ends - 1]


@dataclass
class Encoding:
    """The granules of one encoding: one cube (several when split)."""

    #: its earliest granule's references (subset): the cube's templates (coordinate attributes)
    first: GranuleRefs
    name: str  # its first granule's name (errors)
    shared: dict[str, np.ndarray]  # its shared coordinates' values
    encoding: dict[str, dict[str, str]]
    pieces: list[Piece] = field(default_factory=list)
    start: Any = None  # the earliest granule's first coordinate value

    def ordered(self) -> list[Piece]:
        """Its pieces in coordinate order."""
        return sorted(self.pieces, key=lambda p: p.coordinate[0])


@dataclass
class Scan:
    """What the pass kept: the cube's arrays, and the granules by encoding."""

    paths: list[str]
    coord: str
    shared: list[str]
    encodings: list[Encoding]
    head: GranuleRefs  # the first granule listed (subset): its time units, when normalized
    coord_attrs: dict[str, Any] | None = None  # the cube's coordinate attributes (normalized)


class Interleaved(Exception):
    """Pieces of one encoding interleave: ``order`` is every item's place in a new pass."""

    def __init__(self, order: list[int], units: str | None) -> None:
        super().__init__("pieces interleave")
        self.order = order
        self.units = units  # the normalized cube's time units, kept by the new pass


def _batches(items: Sequence[Any]) -> Iterator[tuple[int, Sequence[Any]]]:
    for start in range(0, len(items), BATCH):
        yield start, items[start:start + BATCH]


def scan(
    items: Sequence[Any], *, skip_cubes: bool, concat_dim: str, on_mismatch: str,
    opts: Mapping[str, Any], normalize_time: bool,
    select: Callable[[GranuleRefs], tuple[list[str], str, list[str]]],
    subset: Callable[[GranuleRefs, Sequence[str], str], GranuleRefs],
    normalized: Callable[..., tuple[list[np.ndarray], dict[str, Any]]],
    staging: Staging | None = None,
) -> Scan:
    """Load, check and fold ``items`` (sidecars or references), :data:`BATCH` at a time.

    ``select`` gives the cube's arrays, coordinate and shared coordinates from the first
    granule; ``subset`` cuts a granule to them; ``normalized(parts, paths, coord, values,
    names, head)`` re-expresses a batch's coordinate values in the cube's time units (those
    of ``head``, the first granule listed, unless given) and returns them and the attributes.
    With ``staging``, each piece's joined arrays go to a file as soon as it is made.

    Raises
    ------
    IncompatibleGranulesError, InvalidRequestError
        As :func:`~h5sidecar.workflows.build_cube`.
    Interleaved
        When the items are not listed in coordinate order (see module docstring).
    """
    out: Scan | None = None
    by_key: dict[str, Encoding] = {}
    for start, batch in _batches(items):
        pairs = load_granules(batch, opts)
        index = [start + i for i, (r, _) in enumerate(pairs) if not (skip_cubes and r.members)]
        pairs = [(r, s) for r, s in pairs if not (skip_cubes and r.members)]
        if not pairs:
            continue
        if out is None:
            paths, coord, shared = select(pairs[0][0])
            head = subset(pairs[0][0], paths, pairs[0][0].source.url)
            out = Scan(paths, coord, shared, [], head)
        names = [r.source.url for r, _ in pairs]
        parts = [subset(r, out.paths, n) for (r, _), n in zip(pairs, names, strict=True)]
        stamps = [s for _, s in pairs]
        del pairs  # the whole references: only the subsets go on, until the batch is folded
        _fold(out, by_key, parts, names, stamps, index, concat_dim=concat_dim,
              on_mismatch=on_mismatch, opts=opts, normalize_time=normalize_time,
              normalized=normalized, staging=staging)
    if out is None:
        raise InvalidRequestError("no granule sidecars to combine (only cubes, or nothing)")
    _check_overlaps(out)
    for enc in out.encodings:
        pieces = enc.ordered()
        if any(a.coordinate[-1] >= b.coordinate[0] for a, b in itertools.pairwise(pieces)):
            firsts = np.concatenate([p.bounds[0] for e in out.encodings for p in e.pieces])
            where = np.concatenate([p.items for e in out.encodings for p in e.pieces])
            units = None if out.coord_attrs is None else out.coord_attrs.get("units")
            raise Interleaved(where[np.argsort(firsts, kind="stable")].tolist(), units)
    return out


def _fold(
    out: Scan, by_key: dict[str, Encoding], parts: list[GranuleRefs], names: list[str],
    stamps: list[tuple[str, str] | None], index: list[int], *, concat_dim: str,
    on_mismatch: str, opts: Mapping[str, Any], normalize_time: bool,
    normalized: Callable[..., Any], staging: Staging | None,
) -> None:
    """Check one batch and fold it into its encodings' pieces."""
    paths, coord = out.paths, out.coord
    ignore = {coord: NORMALIZED_FIELDS} if normalize_time else {}
    groups = encoding_groups(parts, paths, concat_dim, ignore)
    keys = [encoding_key(parts[g[0]], paths, concat_dim, ignore) for g in groups]
    for key, g in zip(keys, groups, strict=True):
        if key not in by_key:
            by_key[key] = Encoding(parts[g[0]], names[g[0]], {},
                                   encodings(parts[g[0]], paths, concat_dim, ignore))
            out.encodings.append(by_key[key])
    if len(by_key) > 1 and on_mismatch == "raise":
        _refuse(out, names, groups, keys, by_key, concat_dim, normalize_time)
    read = read_coords(parts, [coord, *out.shared], opts)
    values = [r[coord] for r in read]
    if normalize_time:
        values, out.coord_attrs = normalized(parts, paths, coord, values, names, out.head)
    check_order(values, names, coord)  # each granule's own values; overlaps: at the end
    inlined = {coord, *out.shared}
    for key, g in zip(keys, groups, strict=True):
        enc = by_key[key]
        if not enc.shared:
            enc.shared = {c: read[g[0]][c] for c in out.shared}
        check_shared_values([enc.shared, *(read[i] for i in g)],
                            [enc.name, *(names[i] for i in g)], out.shared)
        g = sorted(g, key=lambda i: values[i][0])
        if enc.start is None or values[g[0]][0] < enc.start:  # as a build in one batch does
            enc.first, enc.start = parts[g[0]], values[g[0]][0]
        bare = [GranuleRefs(p.source, p.groups,
                            {k: a for k, a in p.arrays.items() if k not in inlined},
                            p.skipped, p.extra, p.members) for p in (parts[i] for i in g)]
        joined = concat_refs(bare, concat_dim, names=[names[i] for i in g])
        compact = _compact(joined, {names[i]: names[i] for i in g})
        members = MemberTable.of(joined.members)
        enc.pieces.append(Piece(
            refs=compact if staging is None else staging.stage(compact, concat_dim),
            members=members, names=_names(members, [names[i] for i in g]),
            stamps=np.array([_stamp(stamps[i]) for i in g], dtype=np.bytes_),
            coordinate=np.concatenate([values[i] for i in g]),
            lengths=np.array([values[i].size for i in g], dtype=np.int64),
            items=np.array([index[i] for i in g], dtype=np.int64),
        ))  # fmt: skip


def _names(members: MemberTable, names: list[str]) -> pa.Array:
    """``names`` in Arrow: the members' URL column itself when it lists them (each granule
    its own source, the usual case), not a second copy of every URL held to the end."""
    out = pa.array(names, pa.string())
    urls = members.urls
    if urls.num_chunks == 1 and urls.chunk(0).equals(out):
        return urls.chunk(0)
    return out


def _stamp(stamp: tuple[str, str] | None) -> bytes:
    return b"" if stamp is None else stamp[1].encode()


def _compact(refs: GranuleRefs, names: Mapping[str, str]) -> GranuleRefs:
    """``refs`` without members (the piece holds them in columns) and its chunks' URLs the
    granules' names (one string a granule, not one more per sidecar it was read from)."""
    arrays = {}
    for path, arr in refs.arrays.items():
        if type(arr) is ArrayRefs:  # joined (not a lazily read array kept whole)
            urls = tuple(names.get(u, u) for u in arr.manifest.urls)
            arr = replace(arr, manifest=arr.manifest.with_urls(urls))
        arrays[path] = arr
    return GranuleRefs(refs.source, refs.groups, arrays, refs.skipped, refs.extra)


def _refuse(out: Scan, names: list[str], groups: list[list[int]], keys: list[str],
            by_key: Mapping[str, Encoding], dim: str, normalize_time: bool) -> None:
    """Raise the mismatch error, naming this batch's granules and each other encoding's
    first granule."""
    others = [e for k, e in by_key.items() if k not in keys]
    of = {i: by_key[k].encoding for k, g in zip(keys, groups, strict=True) for i in g}
    message = encoding_diff([e.encoding for e in others] + [of[i] for i in range(len(names))],
                            [e.name for e in others] + names)
    if not normalize_time:
        ignore = {out.coord: NORMALIZED_FIELDS}
        if len({encoding_key(e.first, out.paths, dim, ignore) for e in by_key.values()}) == 1:
            message += (f"\nOnly the time coordinate {out.coord} differs: pass "
                        "normalize_time=True (--normalize-time) to hold its times in one units")
    raise IncompatibleGranulesError(message)


def _check_overlaps(out: Scan) -> None:
    """Refuse granules (of any encoding: split cubes must not repeat steps) that overlap."""
    pieces = [p for e in out.encodings for p in e.pieces]
    firsts = np.concatenate([p.bounds[0] for p in pieces])
    lasts = np.concatenate([p.bounds[1] for p in pieces])
    if firsts.size < 2:
        return
    order = np.argsort(firsts, kind="stable")
    bad = np.flatnonzero(lasts[order[:-1]] >= firsts[order[1:]])
    if bad.size:
        names = pa.concat_arrays([p.names for p in pieces]).to_pylist()
        a, b = order[bad[0]], order[bad[0] + 1]
        raise IncompatibleGranulesError(
            f"{names[a]} and {names[b]} overlap along {out.coord} ({names[a]} ends at "
            f"{lasts[a]!r}, {names[b]} starts at {firsts[b]!r}): duplicate or overlapping "
            "granules cannot be concatenated; leave one of them out"
        )
