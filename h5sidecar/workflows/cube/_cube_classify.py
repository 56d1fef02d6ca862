"""Which listed sidecars an append must load: the classification, in Arrow over the members.

An append is given every sidecar of DEST (:class:`SidecarPaths`, an Arrow column) and the
cube's members (:class:`~h5sidecar.references.MemberTable`, with each member's sidecar path
below the record's root and its stamp).  Matching the two a Python object per member (a
:class:`SourceInfo` and two dictionary entries each, then a stat through fsspec each) was
~5 s of CPU and ~590 MB at 100,000 members, with or without anything new.  Here the listing is
joined with the members' sidecar column (``pc.index_in``): a listed sidecar that is a member's
has its stamp compared in bulk (one tight ``os.stat`` loop for local files; object stores one
HEAD each, in threads, as before).  Only what that does not settle goes through the per-item
logic: a sidecar no member came from, one whose stamp changed, references given as such.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from h5sidecar.errors import NotIndexedError
from h5sidecar.references import GranuleRefs, SourceInfo
from h5sidecar.workflows.cube._cube_assemble import COORD_READERS, sidecar_stamp
from h5sidecar.workflows.cube._cube_listing import SidecarPaths
from h5sidecar.workflows.cube._cube_parts import Part

__all__ = ["Classified", "classify", "member_rows"]

#: Local sidecars stat-ed, and their paths made Python strings, at a time.
_STAT_SLICE = 10_000


class Classified:
    """What :func:`classify` found: the items to load, how many are unchanged, and the URLs
    of the members seen unchanged (an Arrow column: one string each, not a set)."""

    __slots__ = ("seen", "todo", "unchanged")

    def __init__(self, todo: list[Any], unchanged: int, seen: pa.ChunkedArray) -> None:
        self.todo, self.unchanged, self.seen = todo, unchanged, seen


def member_rows(parts: Sequence[Part], urls: Sequence[str]) -> list[tuple[int, int] | None]:
    """``(part, row)`` of the member recorded at each of ``urls`` (the last part holding it,
    as a mapping over every part's members would give), or None; looked up in Arrow."""
    out: list[tuple[int, int] | None] = [None] * len(urls)
    if not urls:
        return out
    wanted = pa.array(list(urls), pa.string())
    for i, p in enumerate(parts):  # (only the members files that may hold them are read)
        for k, r in enumerate(p.members.rows_of("url", wanted).tolist()):
            if r >= 0:
                out[k] = (i, r)
    return out


def _paths(items: Sequence[Any]) -> pa.Array:
    """Each item's sidecar path (null for references given as such)."""
    if isinstance(items, SidecarPaths):
        return items.arrow
    return pa.array([None if isinstance(x, GranuleRefs) else os.fspath(x) for x in items],
                    pa.string())


def _local_stamp(path: str) -> str | None:
    """:func:`~h5sidecar.workflows.cube._cube_assemble.sidecar_stamp` of a local sidecar by
    ``os.stat`` (fsspec's local ``info`` is the same stat), or None when it cannot be stat-ed
    (then the per-item path says why)."""
    try:
        st = None
        if not path.endswith(".json"):  # a Parquet sidecar's version is its .zmetadata's
            try:
                st = os.stat(f"{path.rstrip('/')}/.zmetadata")
            except (FileNotFoundError, NotADirectoryError):
                st = None
        if st is None:
            st = os.stat(path)
    except OSError:
        return None
    # fsspec's local info: size and mtime (a zero mtime falls through to None, as there)
    return f"{st.st_size}:{st.st_mtime or None}"


def _same_stamps(paths: pa.Array, recorded: pa.Array) -> np.ndarray:
    """Whether each local sidecar's stamp now is the ``recorded`` one (a bool each)."""
    same = np.zeros(len(paths), dtype=bool)
    for start in range(0, len(paths), _STAT_SLICE):
        chunk = paths.slice(start, _STAT_SLICE).to_pylist()
        now = pa.array([_local_stamp(q) for q in chunk], pa.string())
        eq = pc.equal(now, recorded.slice(start, _STAT_SLICE)).fill_null(False)
        same[start:start + len(chunk)] = eq.to_numpy(zero_copy_only=False)
    return same


def classify(items: Sequence[Any], parts: list[Part], out_paths: set[str],
             opts: Any) -> Classified:
    """Items to load (new or changed), how many members are unchanged, and the URLs seen.

    See the module docstring; per item the verdicts are those of a stat/HEAD of every member's
    sidecar and a read of the extras of any other (its source and identity).
    """
    n = len(items)
    paths = _paths(items)
    trimmed = pc.utf8_rtrim(paths, characters="/")
    skip = pc.is_in(trimmed, value_set=pa.array(sorted(out_paths), pa.string())).fill_null(
        False).to_numpy(zero_copy_only=False)
    # each listed sidecar's member (part, row in that part's sidecar columns): a later part's
    # wins, as a mapping of sidecar path -> member over every part would give
    part_of = np.full(n, -1, np.int64)
    row_of = np.full(n, -1, np.int64)
    for i, p in enumerate(parts):
        rows = p.sidecar_rows(paths)
        hit = (rows >= 0) & ~skip
        part_of[hit] = i
        row_of[hit] = rows[hit]
    unchanged = np.zeros(n, dtype=bool)
    remote = np.zeros(n, dtype=bool)
    seen: list[pa.Array] = []
    # the URL and recorded stamp of each listed sidecar's member (the members' rows read
    # alone, not every member's columns)
    hits: dict[int, tuple[pa.Array, pa.Array]] = {}
    pos = np.full(n, -1, np.int64)  # each listed sidecar's place in its part's hits
    for i, p in enumerate(parts):
        at = np.flatnonzero(part_of == i)
        if not at.size:
            continue
        urls, stamps = hits[i] = p.url_stamps(row_of[at])
        pos[at] = np.arange(at.size)
        mine = paths.take(pa.array(at))
        local = ~pc.match_substring(mine, "://").to_numpy(zero_copy_only=False)
        remote[at[~local]] = True
        same = _same_stamps(mine.filter(pa.array(local)), stamps.filter(pa.array(local)))
        unchanged[at[local][same]] = True
        seen.append(urls.filter(pa.array(local)).filter(pa.array(same)))
    rest = np.flatnonzero(~unchanged & ~skip)
    verdicts = _each([items[int(k)] for k in rest],
                     [(hits[part_of[k]][0][pos[k]].as_py(), hits[part_of[k]][1][pos[k]].as_py())
                      if remote[k] else None for k in rest], parts, opts)
    todo = [items[int(k)] for k, (v, _) in zip(rest, verdicts, strict=True) if v == "load"]
    more = [u for v, u in verdicts if v == "unchanged" and u is not None]
    seen.append(pa.array(more, pa.string()))
    count = int(unchanged.sum()) + sum(v == "unchanged" for v, _ in verdicts)
    return Classified(todo, count, pa.chunked_array(seen, pa.string()))


def _exists(path: str, opts: Any) -> bool:
    from h5sidecar.dest import filesystem

    return bool(filesystem(path, opts).exists(path.split("://", 1)[-1]))


def _each(items: list[Any], known: list[tuple[str, str | None] | None], parts: list[Part],
          opts: Any) -> list[tuple[str, str | None]]:
    """The per-item verdicts ``("unchanged", url)`` / ``("load", None)`` / ``("skip", None)``.

    ``known``: the member URL and recorded stamp of a sidecar on an object store that is a
    member's (its HEAD compared here); one small read of the extras of every other.  The
    members met are looked up in Arrow afterwards, all at once.
    """
    from h5sidecar.workflows.index._up_to_date import read_recorded

    def one(x: Any, entry: tuple[str, str | None] | None) -> tuple[str, Any]:
        """("unchanged", url) / ("skip", None) / ("load", None), or ("compare", source)."""
        if isinstance(x, GranuleRefs):
            return "equal", x
        path = os.fspath(x)
        try:
            if entry is not None and sidecar_stamp(path, opts) == entry[1]:
                return "unchanged", entry[0]  # the sidecar the cube was made from
        except NotIndexedError:  # gone since its row was written: the member stays
            return "skip", None
        rec = read_recorded(path, storage_options=opts)
        if rec is None and not _exists(path, opts):
            return "skip", None  # (gone: as a listing would not have found it)
        return ("load", None) if rec is None else ("same", rec.source)

    with ThreadPoolExecutor(COORD_READERS) as pool:
        first = list(pool.map(one, items, known))
    asked = [(k, s) for k, (v, s) in enumerate(first) if v in ("equal", "same")]
    sources: list[SourceInfo] = [s.source if v == "equal" else s for v, s in
                                 (first[k] for k, _ in asked)]
    found = member_rows(parts, [s.url for s in sources])
    out: list[tuple[str, str | None]] = [(v, u) if v in ("unchanged", "load") else ("", None)
                                         for v, u in first]
    for (k, given), source, where in zip(asked, sources, found, strict=True):
        member = None if where is None else parts[where[0]].members[where[1]]
        if first[k][0] == "equal":  # references given as such
            if member == source:
                out[k] = ("unchanged", source.url)
            else:
                out[k] = ("skip", None) if given.members else ("load", None)
        elif member is not None and member.same_object(source):
            out[k] = ("unchanged", source.url)
        else:
            out[k] = ("load", None)
    return out
