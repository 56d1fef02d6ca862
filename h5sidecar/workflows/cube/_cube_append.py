"""Append to a datacube: add the granules not yet in it, replace the members that changed.

The cube's record (:mod:`h5sidecar.workflows.cube._cube_assemble`) says which sidecar, in which
version (size + ETag/mtime), each member came from.  So a listed sidecar whose stamp is
unchanged is skipped after one stat/HEAD, without reading it; any other sidecar has its small
extras block read to learn its source and identity: a source not in the cube is *new*, a member
whose identity changed is *replaced* (its references are rebuilt from the new sidecar, so its
stale references are never served), an equal one is unchanged.  Only new and replaced sidecars
are loaded, and only their coordinates read.  The existing cube's own references are read
(Parquet: its record files) and rewritten atomically; for Icechunk the append is one commit
(:mod:`h5sidecar.workflows.icechunk._icechunk_append`).  Re-running with nothing new writes nothing.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar._memory import give_back
from h5sidecar.errors import IncompatibleGranulesError, InvalidRequestError
from h5sidecar.references import (
    GranuleRefs,
    MemberTable,
    SourceInfo,
    read_refs,
    slice_refs,
    write_refs,
)
from h5sidecar.settings import RecordSettings
from h5sidecar.workflows.cube._cube_assemble import (
    CUBE_KEY,
    assemble,
    cube_record,
    load_granules,
    read_coords,
    read_record,
)
from h5sidecar.workflows.cube._cube_build import (
    CubePart,
    CubeResult,
    _build,
    _sidecar_list,
    _subset,
)
from h5sidecar.workflows.cube._cube_checks import (
    check_order,
    check_shared_values,
    encoding_diff,
    encodings,
)
from h5sidecar.workflows.cube._cube_classify import classify, member_rows
from h5sidecar.workflows.cube._cube_columns import as_columns, columns_record
from h5sidecar.workflows.cube._cube_mark import (
    MARK_KEY,
    MemberUrls,
    changed_sidecars,
    dest_mark,
    marked,
    since,
)
from h5sidecar.workflows.cube._cube_parts import Granule, Part, existing_parts, part_path
from h5sidecar.workflows.cube._cube_tail import append_tail, why_not_tail
from h5sidecar.workflows.cube._cube_time import (
    NORMALIZED_FIELDS,
    check_bounds,
    check_not_fill,
    normalize_times,
    time_attrs,
    time_of,
)

__all__ = ["append_cube"]

_JSON_WHOLE = ("a JSON cube is one document (a Parquet or Icechunk cube's append writes only "
               "what is new)")


def _load_part(path: str, format: str, opts: Mapping[str, Any], concat_dim: str,
               head: GranuleRefs | None = None) -> Part:
    """The cube at ``path`` (``head``: its references, already read lazily)."""
    members: Sequence[SourceInfo]
    if format == "icechunk":
        from h5sidecar.workflows.icechunk._icechunk_append import load_state

        extra, members, coords, state_attrs = load_state(path, opts)
        attrs: Mapping[str, Any] = state_attrs
        record = read_record(extra, path, members)
        refs = None
    else:
        from h5sidecar.read import read_arrays

        refs = head or read_refs(path, storage_options=dict(opts) or None)
        # a Parquet cube's members and per-member record stay Arrow columns: an append looks
        # up the few members it places, it makes no object per member
        members = refs.members
        record = read_record(refs.extra, path, members, lists=False)
        # read from an open of these arrays alone (inline: no source), whose manifests are cut
        # out of the all-arrays file before they are decoded: through the whole cube, every
        # array's chunk rows were decoded with their URLs (~1 KB a member, held to the end)
        names = [record["coord"], *record["shared"]]
        alone = read_refs(path, storage_options=dict(opts) or None,
                          arrays=[glob.escape(n) for n in names])
        coords = read_arrays(alone, names)
        attrs = refs.arrays[record["coord"]].meta.attrs
    if record["concat_dim"] != concat_dim:
        raise InvalidRequestError(
            f"{path} is concatenated along {record['concat_dim']!r}, not {concat_dim!r}")
    return Part(path, record, _table(members), coords[record["coord"]],
                {c: coords[c] for c in record["shared"]}, attrs, refs)


def _table(members: Sequence[SourceInfo]) -> MemberTable:
    return members if isinstance(members, MemberTable) else MemberTable.of(members)


def _place(g: Granule, parts: list[Part], dim: str, on_mismatch: str,
           normalize: bool, member_of: Mapping[str, Part]) -> Part | None:
    """The part ``g`` goes to (its member's, or the first with its encoding); None: a new part.

    The coordinate's ``units`` are compared apart (:func:`_values`); with ``normalize``, so are
    its dtype, storage fill and codecs (its values are re-encoded and held inline).
    """
    url = g.refs.source.url
    coord = parts[0].record["coord"]
    skip = NORMALIZED_FIELDS if normalize else ("units",)

    def comparable(enc: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
        return {k: {f: v for f, v in e.items() if not (k == coord and f in skip)}
                for k, e in enc.items()}

    enc = comparable(encodings(g.refs, parts[0].paths, dim))
    home = [member_of[url]] if url in member_of else []
    candidates = home or parts
    for p in candidates:
        if enc == comparable(p.record["encoding"]):
            return p
    if home or on_mismatch == "raise" or not normalize:
        p = candidates[-1]
        loose = {k: {f: v for f, v in e.items() if not (k == coord and f in NORMALIZED_FIELDS)}
                 for k, e in p.record["encoding"].items()}
        only_time = not normalize and loose == {
            k: {f: v for f, v in e.items() if not (k == coord and f in NORMALIZED_FIELDS)}
            for k, e in encodings(g.refs, p.paths, dim).items()}
        if home or on_mismatch == "raise" or only_time:
            raise IncompatibleGranulesError(
                encoding_diff([p.record["encoding"], encodings(g.refs, p.paths, dim)],
                              [f"the cube {p.path}", url])
                + (f"\nOnly the time coordinate {coord} differs: pass normalize_time=True "
                   "(--normalize-time) to hold its times in the cube's units" if only_time
                   else "")
                + ("" if not home else f"\n{url} is a member of {p.path} and was re-encoded; "
                   "rebuild the cube (mode='build')"))
    return None


def _values(g: Granule, p: Part, coord_attrs: Mapping[str, Any], value: np.ndarray,
            normalize: bool) -> np.ndarray:
    """``g``'s coordinate in ``p``'s units (normalized when asked), or refused."""
    coord = p.record["coord"]
    units = coord_attrs.get("units")
    if units == p.coord_attrs.get("units") and value.dtype == p.coordinate.dtype:
        return value
    if not normalize:
        raise IncompatibleGranulesError(
            f"{coord}.units differs: {units!r} in {g.refs.source.url}; "
            f"{p.coord_attrs.get('units')!r} in the cube {p.path}. Pass normalize_time=True "
            "(--normalize-time) to hold its times in the cube's units")
    check_bounds(p.coord_attrs, {k: g.refs.arrays[k].meta.attrs for k in p.paths}, coord)
    cube_units, calendar = time_attrs(p.coord_attrs)
    out = normalize_times([value], [coord_attrs], [g.refs.source.url], coord, units=cube_units,
                          calendar=calendar, dtype=p.coordinate.dtype)
    check_not_fill(out, p.coord_attrs, [g.refs.source.url], coord)
    return out[0]


def _out_of_order(p: Part) -> str:
    """Why ``p``'s new or replacing granules do not fit its coordinate ('' when they do)."""
    coord = p.record["coord"]
    # the replaced members' rows, in cube order (looked up, not a scan of every member);
    # every member's length only then (a cube in members files: each file read)
    starts = p.starts if p.replaced else np.empty(0, int)
    urls = list(p.replaced)
    rows = [where[1] for where in member_rows([p], urls) if where is not None]
    for k, url in sorted(zip(rows, urls, strict=True)):
        g = p.replaced[url]
        lo = p.coordinate[starts[k] - 1] if k else None
        hi = p.coordinate[starts[k + 1]] if k + 1 < len(p.members) else None
        if (lo is not None and g.values[0] <= lo) or (hi is not None and g.values[-1] >= hi):
            return (f"{url} changed and now spans {coord} {g.values[0].item()!r}.."
                    f"{g.values[-1].item()!r}, outside its place in {p.path} (between "
                    f"{_item(lo)!r} and {_item(hi)!r})")
    if p.new:
        last = p.coordinate[-1]
        if p.replaced.get(p.members[-1].url) is not None:
            last = p.replaced[p.members[-1].url].values[-1]
        check_order([g.values for g in p.new], [g.refs.source.url for g in p.new], coord)
        first = min(p.new, key=lambda g: g.values[0])
        if first.values[0] <= last:
            return (f"{first.refs.source.url} starts at {coord} {first.values[0].item()!r}, "
                    f"not after the end of {p.path} ({last.item()!r}): an append must continue "
                    "the coordinate")
    return ""


def _item(v: Any) -> Any:
    return None if v is None else v.item()


def append_cube(
    sidecars: Any,
    out: str,
    *,
    concat_dim: str,
    format: str,
    on_mismatch: str,
    on_out_of_order: str,
    normalize_time: bool,
    time_units: str | None,
    opts: dict[str, Any],
    rebuild: Callable[[str], CubeResult],
    record_settings: RecordSettings | None = None,
    recheck: bool = False,
) -> CubeResult:
    """``build_cube(..., mode="append")`` (see the module docstring and :func:`build_cube`)."""
    paths = existing_parts(out, format, opts)
    if not paths:
        return rebuild("built")  # nothing to append to yet: the first build
    # before anything of DEST is read (see _cube_mark)
    mark = dest_mark(sidecars, opts, record_settings)
    start: int | str | None = None
    items: Sequence[Any] | None = None
    heads: list[GranuleRefs | None] = [None] * len(paths)
    if mark is not None and not recheck and format != "icechunk":
        # the cubes' records (a Parquet cube's .zmetadata: its members are not read yet)
        records = [read_refs(p, storage_options=dict(opts) or None) for p in paths]
        heads = list(records)
        start = since([h.extra.get(CUBE_KEY) or {} for h in records], mark)
        if start is not None:  # what DEST's record wrote since the cubes were
            items = changed_sidecars(os.fspath(sidecars), start, opts, record_settings)
            done = _nothing_new(records, paths, concat_dim, time_units) if not items else None
            if done is not None:
                return done
    parts = [_load_part(p, format, opts, concat_dim, h) for p, h in zip(paths, heads, strict=True)]
    for p in parts:
        _check_units(p.coord_attrs, time_units)
    if items is None:  # every sidecar of DEST, listed
        items = _sidecar_list(sidecars, opts, record_settings)
    out_paths = {p.rstrip("/") for p in paths}
    found = classify(items, parts, out_paths, opts)
    todo = found.todo
    loaded = [(r, s, x) for (r, s), x in zip(load_granules(todo, opts), todo, strict=True)
              if not r.members]  # cubes among the sidecars are not granules
    grans = [Granule(_subset(r, parts[0].paths, r.source.url), x, s) for r, s, x in loaded]
    # the part of each loaded granule that is a member, looked up in Arrow: a mapping of
    # every member was an object per member (a scan of them was 1,000 x 99,000 comparisons)
    member_of = {g.refs.source.url: parts[where[0]] for g, where in zip(
        grans, member_rows(parts, [g.refs.source.url for g in grans]), strict=True)
        if where is not None}
    orphans: list[Granule] = []
    for g in grans:
        home = _place(g, parts, concat_dim, on_mismatch, normalize_time, member_of)
        if home is None:
            orphans.append(g)
        elif g.refs.source.url in member_of:
            home.replaced[g.refs.source.url] = g
        else:
            home.new.append(g)
    homed = [(g, p) for p in parts for g in [*p.new, *p.replaced.values()]]
    coord = parts[0].record["coord"]
    read = read_coords([g.refs for g, _ in homed], [coord, *parts[0].record["shared"]], opts)
    for (g, p), r in zip(homed, read, strict=True):
        check_shared_values([p.shared, r], [p.path, g.refs.source.url], list(p.shared))
        g.values = _values(g, p, g.refs.arrays[coord].meta.attrs, r[coord], normalize_time)
    for p in parts:
        p.new.sort(key=lambda g: g.values[0])
        why = _out_of_order(p)
        if why and on_out_of_order == "rebuild" and start is not None:
            # whether every member's sidecar is still there takes the whole listing
            return append_cube(
                sidecars, out, concat_dim=concat_dim, format=format, on_mismatch=on_mismatch,
                on_out_of_order=on_out_of_order, normalize_time=normalize_time,
                time_units=time_units, opts=opts, rebuild=rebuild,
                record_settings=record_settings, recheck=True)  # fmt: skip
        if why and on_out_of_order == "rebuild":
            missing = _missing(parts, found.seen, [g.refs.source.url for g in grans])
            if len(missing):
                raise InvalidRequestError(
                    f"{why}; rebuilding needs every member's sidecar, and {len(missing)} are not "
                    f"among the sidecars given (e.g. {pc.min(missing).as_py()}): pass the DEST")
            return rebuild("rebuilt")
        if why:
            raise IncompatibleGranulesError(
                f"{why}. Pass on_out_of_order='rebuild' (--on-out-of-order rebuild) to rebuild "
                "the cube from all sidecars, or leave the granule out")
    whys: list[str] = []  # why each part written was rewritten whole ('' for a tail)
    written = [_write_part(p, concat_dim, format, opts, whys, mark) if p.new or p.replaced
               else _summary(p) for p in parts]
    if orphans:  # split: granules of another encoding start new cubes after the existing ones
        variables = [q.rpartition("/")[2] for q in parts[0].paths]
        group = coord.rpartition("/")[0] or None
        res = _build([g.item for g in orphans], part_path(out, len(parts)), concat_dim=concat_dim,
                     group=group, variables=variables, format=format, on_mismatch="split",
                     opts=opts, normalize_time=normalize_time, time_units=time_units, mark=mark)
        written.extend(res.cubes)
    added = tuple(g.refs.source.url for p in parts for g in p.new) + tuple(
        g.refs.source.url for g in orphans)
    replaced = tuple(u for p in parts for u in p.replaced)
    return CubeResult(
        cubes=tuple(written), concat_dim=concat_dim, variables=tuple(parts[0].paths),
        action="appended" if added or replaced else "up_to_date", added=added,
        replaced=replaced, sidecars_read=len(todo),
        # from the record's mark: every member but those replaced (none was stat-ed)
        unchanged=found.unchanged if start is None else sum(
            len(p.members) - len(p.replaced) for p in parts),
        written=_how(format, whys), why_rewritten=next((w for w in whys if w), ""),
    )  # fmt: skip


def _check_units(attrs: Mapping[str, Any], time_units: str | None) -> None:
    if time_units is not None and attrs.get("units") != time_units:
        raise InvalidRequestError(
            f"the cube's time units are {attrs.get('units')!r}; an append keeps them "
            f"(time_units={time_units!r} applies to a new cube)")


def _nothing_new(heads: list[GranuleRefs], paths: list[str], concat_dim: str,
                 time_units: str | None) -> CubeResult | None:
    """The result of an append that DEST's record says has nothing to add, from the cubes'
    records alone (None when one lacks what that takes: then the cubes are loaded)."""
    cubes = []
    for head, path in zip(heads, paths, strict=True):
        record = head.extra[CUBE_KEY]
        span, coord = record[MARK_KEY].get("span"), record.get("coord")
        if span is None or coord not in head.arrays or "encoding" not in record:
            return None
        if record.get("concat_dim") != concat_dim:
            raise InvalidRequestError(
                f"{path} is concatenated along {record.get('concat_dim')!r}, not "
                f"{concat_dim!r}")
        meta = head.arrays[coord].meta
        _check_units(meta.attrs, time_units)
        cubes.append(CubePart(path=path, granules=MemberUrls(head.members),
                              length=int(meta.shape[0]), first=span[0], last=span[1],
                              **time_of(meta.attrs)))
    return CubeResult(cubes=tuple(cubes), concat_dim=concat_dim,
                      variables=tuple(heads[0].extra[CUBE_KEY]["encoding"]),
                      action="up_to_date", unchanged=sum(len(h.members) for h in heads))


def _missing(parts: list[Part], seen: pa.ChunkedArray, loaded: list[str]) -> pa.Array:
    """The members' URLs (distinct) neither seen unchanged nor loaded again."""
    urls = pa.chunked_array([p.members.urls for p in parts]).combine_chunks()
    known = pa.concat_arrays([seen.combine_chunks(), pa.array(loaded, pa.string())])
    return pc.unique(urls.filter(pc.invert(pc.is_in(urls, value_set=known))))


def _how(format: str, whys: list[str]) -> str:
    if not whys:
        return ""
    if format == "icechunk":
        return "commit"
    return "rewritten" if any(whys) else "tail"


def _summary(p: Part) -> CubePart:
    return CubePart(path=p.path, granules=MemberUrls(p.members),
                    length=int(p.coordinate.size), first=p.coordinate[0].item(),
                    last=p.coordinate[-1].item(), **time_of(p.coord_attrs))


def _pieces(p: Part, dim: str, objects: bool = True
            ) -> tuple[list[GranuleRefs], list[str], list[np.ndarray], list[int],
                       dict[str, list[str]]]:
    """The part cut around its replaced members, then the new granules, in order.

    ``objects=False`` (a Parquet cube's members in columns, rebuilt by :func:`_columns_after`):
    no mapping of every member's sidecar is made (returned empty) and the unchanged members'
    slices carry no identities, only their first member's as their source (each a
    :class:`SourceInfo` per member: ~1 GB at a million members).
    """
    assert p.refs is not None
    record, starts = p.record, p.starts
    held = {record["coord"], *record["shared"]}
    bare = GranuleRefs(p.refs.source, p.refs.groups,
                       {k: a for k, a in p.refs.arrays.items() if k not in held},
                       p.refs.skipped, p.refs.extra, p.refs.members if objects else ())  # fmt: skip
    pieces, names, values, lengths = [], [], [], []
    # the O(members) path by design: the cube is rewritten whole
    sidecars = p.sidecar_map() if objects else {}
    member_lengths = p.lengths.tolist()

    def url_of(i: int) -> str:  # member i's (a lazy table in files: its file read, not all)
        return str(p.members.take(np.array([i]), ["url"]).column("url")[0].as_py())

    def keep(a: int, b: int) -> None:  # members a..b-1, unchanged
        if a < b:
            if objects:
                whole = a == 0 and b == len(p.members)
                piece = bare if whole else slice_refs(
                    bare, dim, int(starts[a]), int(starts[b]), tuple(p.members[a:b]))
            else:  # (its members: the table's rows, see _columns_after)
                cut = slice_refs(bare, dim, int(starts[a]), int(starts[b]), ())
                piece = GranuleRefs(p.members[a], cut.groups, cut.arrays, cut.skipped,
                                    cut.extra, ())
            pieces.append(piece)
            names.append(f"{url_of(b - 1)} (in {p.path})")
            values.append(p.coordinate[starts[a]:starts[b]])
            lengths.extend(member_lengths[a:b])

    def add(g: Granule) -> None:
        url = g.refs.source.url
        pieces.append(g.refs)
        names.append(url)
        values.append(g.values)
        lengths.append(int(g.values.size))
        if not objects:
            return
        if g.stamp is not None:
            sidecars[url] = list(g.stamp)
        else:
            sidecars.pop(url, None)

    a = 0
    # the replaced members' rows, in cube order (looked up, not a scan of every member's URL)
    rows = p.members.rows_of("url", pa.array(list(p.replaced), pa.string())).tolist()
    for k, url in sorted(zip(rows, p.replaced, strict=True)):
        keep(a, k)
        add(p.replaced[url])
        a = k + 1
    keep(a, len(p.members))
    for g in p.new:
        add(g)
    return pieces, names, values, lengths, sidecars


def _columns_after(p: Part) -> tuple[MemberTable, pa.ChunkedArray, pa.ChunkedArray, str]:
    """A Parquet cube's members after its append (the replaced rows swapped for their new
    identities, the new members after them), each one's sidecar path and stamp (null: none),
    as the record's lists would give them, and the folder the paths are relative to (the
    cube's root; "" when a new sidecar is outside it: then every path is made full).

    The unchanged members are slices of the cube's columns between the replaced rows, joined
    as chunks (no object, and no copy, a member: a take of every row was ~0.2 GB at a
    million)."""
    old = p.members.table
    fields = MemberTable.of(()).table.schema.names
    root = str(p.record["sidecars"]["root"])
    replaced = list(p.replaced.values())
    rows = p.members.rows_of("url", pa.array([g.refs.source.url for g in replaced],
                                             pa.string())).tolist()
    by_row = sorted(zip(rows, range(len(replaced)), strict=True))
    added = [*replaced, *p.new]
    fresh = MemberTable.of([g.refs.source for g in added]).table.select(fields)
    new = [None if g.stamp is None else g.stamp[0] for g in added]
    if all(q is None or q.startswith(root) for q in new):  # kept relative to the cube's root
        own = old.column("sidecar")
        new = [None if q is None else q[len(root):] for q in new]
    else:  # a new sidecar outside it: every member's full path
        own = pc.binary_join_element_wise(pa.scalar(root, pa.string()),
                                          old.column("sidecar"), "")
        root = ""
    columns = {
        "identity": (old.select(fields), fresh),
        "path": (own, pa.array(new, pa.string())),
        "stamp": (old.column("stamp").cast(pa.string()),
                  pa.array([None if g.stamp is None else g.stamp[1] for g in added],
                           pa.string())),
    }
    out: dict[str, list] = {k: [] for k in columns}
    start = 0
    for row, i in [*by_row, (len(old), -1)]:  # the old rows up to each replaced one, then it
        for k, (mine, theirs) in columns.items():
            out[k].append(mine.slice(start, row - start))
            if i >= 0:
                out[k].append(theirs.slice(i, 1))
        start = row + 1
    for k, (_, theirs) in columns.items():  # the new members
        out[k].append(theirs.slice(len(replaced)))
    identities = pa.concat_tables(out["identity"])
    paths, stamps = (pa.chunked_array([c for part in out[k] for c in (
        part.chunks if isinstance(part, pa.ChunkedArray) else [part])], pa.string())
        for k in ("path", "stamp"))
    return MemberTable(identities), paths, stamps, root


def _write_part(p: Part, dim: str, format: str, opts: Mapping[str, Any],
                whys: list[str], mark: Mapping[str, Any] | None) -> CubePart:
    """Write ``p`` with its new and replaced members, and ``mark`` (None: none) in its
    record; an Icechunk commit keeps the mark it had (an older one: safe, see _cube_mark)."""
    if format == "icechunk":
        from h5sidecar.workflows.icechunk._icechunk_append import append_icechunk

        whys.append("")
        return append_icechunk(p, dim, opts)
    assert p.refs is not None
    p.record.pop(MARK_KEY, None)
    if mark is not None:
        p.record[MARK_KEY] = dict(mark)
    why = (_JSON_WHOLE if format == "json" else why_not_tail(p, dim, opts))
    whys.append(why)
    if not why:  # only the new members' files and each array's last partial record
        return append_tail(p, dim, opts)
    columns = format == "parquet" and p.in_columns  # its members rebuilt in Arrow
    pieces, names, values, lengths, sidecars = _pieces(p, dim, objects=not columns)
    give_back()  # the cube's manifests decoded and sliced
    record = {**p.record, **cube_record(
        concat_dim=dim, coord=p.record["coord"], shared=p.record["shared"],
        lengths=[] if columns else lengths, encoding=p.record["encoding"], sidecars=sidecars,
        order=[] if columns else [*p.members.urls.to_pylist(),
                                  *(g.refs.source.url for g in p.new)],
        normalized=bool(p.record.get("normalized_time")))}  # fmt: skip
    coordinate = np.concatenate(values).astype(p.coordinate.dtype, copy=False)
    held = [p.record["coord"], *p.record["shared"]]
    table = None
    if columns:  # the per-member lists as member columns, made in Arrow (see _cube_columns)
        identities, paths, stamps, below = _columns_after(p)
        record, table = columns_record(record, identities, np.asarray(lengths, np.int64),
                                       paths, stamps, below=below)
        del identities, paths, stamps
        give_back()
    elif format == "parquet":  # its per-member lists as member columns (see _cube_columns)
        order = [*p.members.urls.to_pylist(), *(g.refs.source.url for g in p.new)]
        by_url = {m.url: m for m in p.members}
        by_url.update({g.refs.source.url: g.refs.source
                       for g in [*p.new, *p.replaced.values()]})
        record, table = as_columns(record, [by_url[u] for u in order])
    marked(record, p.record.get(MARK_KEY), coordinate)  # DEST's record mark (see _cube_mark)
    cube = assemble(pieces, names, paths=list(p.refs.arrays), coord=p.record["coord"],
                    coordinate=coordinate, templates={c: p.refs.arrays[c] for c in held},
                    shared_values=p.shared, concat_dim=dim, record=record, members=table)
    del pieces
    p.refs = None  # the cube's references as read (their manifests: joined into the new)
    give_back()  # the slices joined
    write_refs(cube, p.path, format=format,  # type: ignore[arg-type]
               storage_options=dict(opts) or None)
    members = cube.members  # (a table's URLs named lazily: no identity made per member)
    return CubePart(path=p.path, granules=MemberUrls(members) if isinstance(
                        members, MemberTable) else tuple(m.url for m in members),
                    length=int(coordinate.size), first=coordinate[0].item(),
                    last=coordinate[-1].item(), **time_of(p.coord_attrs))
