"""The whole-build half of :func:`~h5sidecar.workflows.build_cube` and the result records.

Everything a build needs below the public entry point: the selection of arrays, the checks,
the ordering and the writes (see :mod:`h5sidecar.workflows.cube._build_cube`); appends
(:mod:`h5sidecar.workflows.cube._cube_append`) reuse it for rebuilds and split-off parts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.errors import IncompatibleGranulesError, InvalidRequestError
from h5sidecar.references import GranuleRefs, MemberTable, UrlColumn, write_refs
from h5sidecar.settings import RecordSettings
from h5sidecar.workflows.cube._cube_assemble import assemble, cube_record
from h5sidecar.workflows.cube._cube_batches import Interleaved, Scan, scan
from h5sidecar.workflows.cube._cube_checks import encodings
from h5sidecar.workflows.cube._cube_columns import columns_record
from h5sidecar.workflows.cube._cube_listing import SidecarPaths, list_sidecars
from h5sidecar.workflows.cube._cube_mark import dest_mark, marked
from h5sidecar.workflows.cube._cube_staging import StagedRefs, Staging, join_staged
from h5sidecar.workflows.cube._cube_time import (
    NORMALIZED_FIELDS,
    check_bounds,
    check_not_fill,
    normalize_times,
    time_attrs,
    time_labels,
    time_of,
)

__all__ = ["CubePart", "CubeResult", "cube_paths", "write_cube"]

#: Dimension coordinates other than the concat one (``lat``, ``lon``) up to this size are read
#: from every granule, compared, and held inline in the cube (opening then reads no source).
SHARED_COORD_BYTES = 8 * 2**20
_NO_NAMES = pa.array([], pa.string())


@dataclass(frozen=True, slots=True)
class CubePart:
    """One written cube.

    Attributes
    ----------
    path : str
        Where it was written.
    granules : sequence of str
        Its granules' source URLs, in concatenation (coordinate) order (a tuple, or for a
        built Parquet cube its URL column: :class:`~h5sidecar.references.UrlColumn`; for an
        append that found nothing new, a view that reads the members when first used).
    length : int
        Length of the concatenated dimension.
    first, last : Any
        First and last raw values of the concatenated coordinate.
    units, calendar : str or None
        The coordinate's CF ``units`` and ``calendar`` attributes (None without them).
    """

    path: str
    granules: Sequence[str]
    length: int
    first: Any
    last: Any
    units: str | None = None
    calendar: str | None = None

    @property
    def bounds(self) -> tuple[str, str]:
        """``(first, last)`` as ISO 8601 dates when the coordinate holds CF times, else as
        numbers."""
        first, last = time_labels([self.first, self.last], self.units, self.calendar)
        return first, last


@dataclass(frozen=True, slots=True)
class CubeResult:
    """What :func:`build_cube` wrote: one cube, or one per consistent encoding (split)."""

    cubes: tuple[CubePart, ...]
    concat_dim: str
    variables: tuple[str, ...] = field(default=())
    #: ``"built"``, ``"rebuilt"`` (an append that had to rebuild), ``"appended"`` or
    #: ``"up_to_date"`` (an append with nothing new: nothing was written).
    action: str = "built"
    #: Source URLs of the granules added, and of the members replaced (their source changed).
    added: Sequence[str] = ()
    replaced: tuple[str, ...] = ()
    #: Append only: sidecars loaded (new or changed ones), and members recognized as unchanged
    #: from their sidecar's stamp alone (one stat/HEAD each, nothing read) or, when DEST's
    #: record said what changed (see :mod:`._cube_mark`), every member not replaced.
    sidecars_read: int = 0
    unchanged: int = 0
    #: How an append wrote the cube: ``"tail"`` (a Parquet cube: only the new members' files
    #: and the last partial ones), ``"rewritten"`` (whole; :attr:`why_rewritten` says why),
    #: ``"commit"`` (Icechunk: one commit of the new references); ``""`` for anything else.
    written: str = ""
    why_rewritten: str = ""

    @property
    def path(self) -> str:
        """The (first) cube's path."""
        return self.cubes[0].path


def cube_paths(out: str, n: int) -> list[str]:
    """Where ``n`` split cubes go: ``out`` itself when ``n == 1``, else ``NAME-0.EXT``, ...

    The index goes before a ``.parq``/``.json`` suffix (``cube.parq`` -> ``cube-0.parq``),
    else at the end (``cube`` -> ``cube-0``); cubes are numbered in coordinate order.
    """
    if n == 1:
        return [out]
    stem, ext = os.path.splitext(out.rstrip("/"))
    if ext not in (".parq", ".json"):
        stem, ext = out.rstrip("/"), ""
    return [f"{stem}-{i}{ext}" for i in range(n)]


def _sidecar_list(
    sidecars: str | os.PathLike[str] | Sequence[Any],
    storage_options: Mapping[str, Any] | None,
    record_settings: RecordSettings | None = None,
) -> Sequence[Any]:
    if isinstance(sidecars, GranuleRefs):
        return [sidecars]
    if isinstance(sidecars, str | os.PathLike):
        found = list_sidecars(sidecars, storage_options, record_settings)
        if not len(found):
            raise InvalidRequestError(
                f"no sidecars under {os.fspath(sidecars)}; index the granules first "
                "(`h5sidecar index SOURCE -o DEST`)"
            )
        return found
    return list(sidecars)


def _sidecar_column(items: Sequence[Any], where: np.ndarray, stamps: np.ndarray) -> pa.Array:
    """Each member's sidecar path (``where``: its item; null for references given as such,
    whose stamp is empty), taken in Arrow from a listing of DEST: no string per member."""
    given = stamps == b""
    if isinstance(items, SidecarPaths):
        in_order = len(where) == len(items) and bool((where == np.arange(len(where))).all())
        # DEST listed in coordinate order (the usual case): its column itself, not a copy
        column = items.arrow if in_order else items.take(where).arrow
        if given.any():
            column = pc.if_else(pa.array(given), pa.scalar(None, pa.string()), column)
        return column
    return pa.array([None if g else os.fspath(items[i]) for i, g in
                     zip(where.tolist(), given.tolist(), strict=True)], pa.string())


def _selection(
    refs: GranuleRefs, dim: str, group: str | None, variables: Sequence[str] | None
) -> tuple[list[str], str]:
    """Array paths to keep and the coordinate's path (checked against the first granule)."""
    prefix = (group or "").strip("/")
    join = (lambda n: f"{prefix}/{n}") if prefix else (lambda n: n)
    in_group = [p for p in refs.arrays if p.rpartition("/")[0] == prefix]
    if not in_group:
        raise InvalidRequestError(f"no variables in group {prefix!r} of {refs.source.url}")
    coord = join(dim)
    if coord not in refs.arrays or refs.arrays[coord].meta.dimension_names != (dim,):
        raise InvalidRequestError(
            f"{refs.source.url} has no 1-D coordinate variable {coord!r}; a cube is "
            "concatenated along a dimension with a coordinate variable of the same name"
        )
    if variables is None:
        keep = in_group
    else:
        missing = [v for v in variables if join(v) not in refs.arrays]
        if missing:
            raise InvalidRequestError(f"no variable(s) {', '.join(missing)} in {refs.source.url}")
        wanted = {join(v) for v in variables}
        dims = {d for v in wanted for d in refs.arrays[v].meta.dimension_names}
        keep = [p for p in in_group if p in wanted or p.rpartition("/")[2] in dims]
    if coord not in keep:
        keep.append(coord)
    return keep, coord


def _shared_coords(refs: GranuleRefs, paths: Sequence[str], coord: str) -> list[str]:
    """Non-empty 1-D dimension coordinates but ``coord``, small enough to compare and inline."""
    out = []
    for p in paths:
        meta = refs.arrays[p].meta
        if (p != coord and len(meta.shape) == 1 and meta.dimension_names == (p.rpartition("/")[2],)
                and 0 < meta.shape[0] * meta.numpy_dtype.itemsize <= SHARED_COORD_BYTES
                and not meta.numpy_dtype.hasobject):
            out.append(p)
    return out


def _subset(refs: GranuleRefs, paths: Sequence[str], name: str) -> GranuleRefs:
    missing = [p for p in paths if p not in refs.arrays]
    if missing:
        raise IncompatibleGranulesError(
            f"{name} lacks {', '.join(missing)}, which the first granule has; "
            "combine only granules of one product"
        )
    groups = {g: a for g, a in refs.groups.items()
              if g == "" or any(p.startswith(g + "/") for p in paths)}
    return GranuleRefs(refs.source, groups, {p: refs.arrays[p] for p in paths},
                       refs.skipped, refs.extra, refs.members)


def write_cube(cube: GranuleRefs, target: str, format: str, opts: Mapping[str, Any]) -> str:
    """Write a whole cube (atomically; a new commit for Icechunk); return its path."""
    if format != "icechunk":
        return write_refs(cube, target, format=format,  # type: ignore[arg-type]
                          storage_options=dict(opts) or None)
    from h5sidecar.workflows.icechunk._icechunk import write_icechunk

    n = cube.extra["cube"]["granules"]
    write_icechunk(cube, target, storage_options=opts or None,
                   sources={m.url: m for m in cube.members},
                   message=f"h5sidecar cube: {n} granules")
    return target


def _build(
    sidecars: Any, out: str, *, concat_dim: str, group: str | None,
    variables: Sequence[str] | None, format: str, on_mismatch: str, opts: dict[str, Any],
    normalize_time: bool, time_units: str | None, action: str = "built",
    record_settings: RecordSettings | None = None, mark: dict[str, Any] | None = None,
) -> CubeResult:
    """Build the cube(s); ``mark``: DEST's record mark to keep in them (default: taken from
    ``sidecars`` when it is a DEST with a record, before it is listed; see :mod:`._cube_mark`)."""
    if mark is None:
        mark = dest_mark(sidecars, opts, record_settings)
    items = _sidecar_list(sidecars, opts, record_settings)

    def select(first: GranuleRefs) -> tuple[list[str], str, list[str]]:
        paths, coord = _selection(first, concat_dim, group, variables)
        return paths, coord, _shared_coords(first, paths, coord)

    def run(items: Sequence[Any], units: str | None) -> Scan:
        return scan(items, skip_cubes=isinstance(sidecars, str | os.PathLike),
                    concat_dim=concat_dim, on_mismatch=on_mismatch, opts=opts,
                    normalize_time=normalize_time, select=select, subset=_subset,
                    normalized=partial(_normalized, time_units=units),
                    staging=staging)  # fmt: skip

    with Staging(out) as staging:
        return _scan_and_write(items, run, out, concat_dim=concat_dim, format=format,
                               opts=opts, normalize_time=normalize_time, action=action,
                               time_units=time_units, mark=mark)


def _scan_and_write(
    items: Sequence[Any], run: Callable[[Sequence[Any], str | None], Scan], out: str, *,
    concat_dim: str, format: str, opts: dict[str, Any], normalize_time: bool, action: str,
    time_units: str | None = None, mark: Mapping[str, Any] | None = None,
) -> CubeResult:
    try:
        # cubes written into DEST (by an earlier run) are not granules of the next one
        found = run(items, time_units)
    except Interleaved as again:  # not listed in coordinate order: once more, in that order
        items = (items.take(again.order) if isinstance(items, SidecarPaths)
                 else [items[i] for i in again.order])
        found = run(items, time_units or again.units)
    paths, coord = found.paths, found.coord
    ordered = sorted(found.encodings, key=lambda e: min(p.coordinate[0] for p in e.pieces))
    targets = cube_paths(out, len(ordered))
    written: list[CubePart] = []
    named: list[Sequence[str]] = []  # each cube's members' URLs
    ignore = {coord: NORMALIZED_FIELDS} if normalize_time else {}
    for target, enc in zip(targets, ordered, strict=True):
        pieces = enc.ordered()
        ends = np.cumsum([len(p.names) for p in pieces]).tolist()
        members = MemberTable.concat([p.members for p in pieces])
        urls = pa.concat_arrays([p.names for p in pieces])  # every member's URL, one copy
        for p in pieces:  # in ``members`` now (Arrow memory is freed at once, not collected)
            p.members, p.names = MemberTable.of(()), _NO_NAMES
        # the members' URL column ``urls`` itself when equal (one copy held, not two)
        shared = members.sharing_urls(urls)
        _check_members(shared)  # so ``urls`` are unique when they are the members' URLs
        names = _url_table(urls, shared is not members, format)
        members = shared
        del shared
        by_piece = [names[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        stamps = np.concatenate([p.stamps for p in pieces])
        where = np.concatenate([p.items for p in pieces])
        lengths = np.concatenate([p.lengths for p in pieces])
        columns = format == "parquet"  # its per-member lists as member columns
        sidecar_paths: Any = _sidecar_column(items, where, stamps)
        if not columns:  # a JSON cube's (or Icechunk commit's) record lists them
            sidecar_paths = sidecar_paths.to_pylist()
        record = cube_record(
            concat_dim=concat_dim, coord=coord, shared=found.shared,
            lengths=() if columns else lengths.tolist(),
            encoding=encodings(enc.first, paths, concat_dim, ignore),
            sidecars=None, order=names,
            aligned=([], []) if columns else (
                sidecar_paths, [s.decode() or None for s in stamps.tolist()]),
            normalized=normalize_time,
        )  # fmt: skip
        if columns:
            record, members = columns_record(record, members, lengths, sidecar_paths, stamps)
        del stamps, where, sidecar_paths, lengths
        coordinate = np.concatenate([p.coordinate for p in pieces])
        marked(record, mark, coordinate)
        # named by their last granule: a piece's partial last chunk is what concat refuses
        refs: list[Any] = [p.refs for p in pieces]
        if all(isinstance(r, StagedRefs) for r in refs):  # joined a piece at a time
            refs = [join_staged(refs, by_piece, concat_dim, order=names)]
        cube = assemble(
            refs, [n[-1] for n in by_piece][-len(refs):], paths=paths, coord=coord,
            coordinate=coordinate, templates={p: enc.first.arrays[p] for p in [coord, *found.shared]},
            shared_values=enc.shared, concat_dim=concat_dim,
            record=record, coord_attrs=found.coord_attrs, members=members,
        )  # fmt: skip
        del pieces, enc.pieces[:], record, members, refs, by_piece  # in the cube: freed before the write
        path = write_cube(cube, target, format, opts)
        del cube
        # the cube's coordinate attributes: normalized ones, else its first granule's
        attrs = found.coord_attrs or enc.first.arrays[coord].meta.attrs
        written.append(CubePart(path=path, granules=names, length=int(coordinate.size),
                                first=coordinate[0].item(), last=coordinate[-1].item(),
                                **time_of(attrs)))
        named.append(names)
    added = named[0] if len(named) == 1 else tuple(u for n in named for u in n)
    return CubeResult(cubes=tuple(written), concat_dim=concat_dim, variables=tuple(paths),
                      action=action, added=added)


def _url_table(urls: pa.Array, distinct: bool, format: str) -> Sequence[str]:
    """The members' URLs in one sequence: the cube's URL table, its part's granules and the
    result's ``added`` (one cube) are it, not copies of it.

    For a Parquet cube, the Arrow column itself (:class:`~h5sidecar.references.UrlColumn`,
    whose writers take it as it is: no Python string a member, ~110 bytes each at the write);
    a JSON cube's or Icechunk commit's writers go chunk by chunk, so theirs is a tuple of str.
    """
    if format != "parquet":
        return tuple(urls.to_pylist())
    return UrlColumn(urls, distinct=True if distinct else None)


def _check_members(members: MemberTable) -> None:
    """Refuse a source listed twice (two sidecars of it, e.g. one left from before its
    source changed), naming both identities as :func:`~h5sidecar.references.member_identities`
    does."""
    twice = members.duplicate_url()
    if twice is None:
        return
    a, b = [m for m in members if m.url == twice][:2]  # (only on this error)
    raise IncompatibleGranulesError(
        f"two sidecars describe {twice} differently ({a} vs {b}); one of them is stale: "
        "re-index the source" if a != b else
        f"two sidecars describe {twice}: leave one of them out"
    )


def _normalized(
    parts: Sequence[GranuleRefs], paths: Sequence[str], coord: str,
    values: list[np.ndarray], names: Sequence[str], first: GranuleRefs, *,
    time_units: str | None,
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Every granule's coordinate in one time units (see :mod:`._cube_time`) and its attrs:
    ``time_units``, else those of ``first`` (the first granule listed)."""
    head = first.arrays[coord].meta.attrs
    check_bounds(head, {p: first.arrays[p].meta.attrs for p in paths}, coord)
    units, calendar = time_attrs(head)
    units = time_units or units
    dtype = first.arrays[coord].meta.numpy_dtype
    out = normalize_times(values, [p.arrays[coord].meta.attrs for p in parts], names, coord,
                          units=units, calendar=calendar, dtype=dtype)
    check_not_fill(out, head, names, coord)
    return out, {**head, "units": units}
