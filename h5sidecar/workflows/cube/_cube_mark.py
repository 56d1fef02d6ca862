"""Where DEST's record stood when a cube was written, so an append asks it what changed since.

A cube built or appended from a local DEST whose record (:mod:`h5sidecar.dest._record_db`)
numbers its rows keeps that record's :meth:`~h5sidecar.dest.Record.mark` in its record
(``extra["cube"]["record_mark"]``: the record file, its id and the counter), taken *before*
DEST was listed.  Every row numbered up to it was in the listing the cube was made from; every granule
indexed (or re-indexed) since has a row numbered above it.  So the next append loads only those
rows' sidecars (one indexed query), instead of listing DEST and comparing every member's
sidecar stamp.  The mark also holds the cube's first and last coordinate values (``span``), so
an append that finds nothing new answers from ``.zmetadata`` alone: a Parquet cube's members
and manifests are not read (at 100,000 members they were ~1.3 KB a member of memory).

The mark is taken before the listing, so a row written during it is asked again next time
(never missed).  What the record cannot see is a sidecar rewritten behind its back (by hand,
by another tool): ``recheck=True`` (``cube --append --recheck``) lists DEST and compares every
member's sidecar stamp, as an append without a mark does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np
import pyarrow as pa

from h5sidecar.dest import is_remote
from h5sidecar.workflows.cube._cube_listing import SidecarPaths

__all__ = ["MARK_KEY", "MemberUrls", "changed_sidecars", "dest_mark", "marked", "since"]

#: The key of the mark in a cube's record.
MARK_KEY = "record_mark"


def dest_mark(sidecars: Any) -> dict[str, Any] | None:
    """The mark of ``sidecars``' record when it is a local DEST with a record that numbers its
    rows (``{"record": its real path, "uid": its id, "seq": the counter}``), else None."""
    if not isinstance(sidecars, str | os.PathLike) or is_remote(os.fspath(sidecars)):
        return None
    from h5sidecar.dest import open_record, record_path

    path = record_path(os.fspath(sidecars))
    if not os.path.exists(path):
        return None
    record = open_record(os.fspath(sidecars), create=False)
    try:
        held = record.mark()
    finally:
        record.close()
    if held is None:
        return None
    return {"record": os.path.realpath(path), "uid": held[0], "seq": held[1]}


def since(records: Sequence[Mapping[str, Any]], mark: Mapping[str, Any] | None) -> int | None:
    """The counter every cube part's record was written at (the oldest of them), when each
    holds a mark of the same record as ``mark`` (its path and id: not a DEST removed and
    indexed anew at the same place); else None (list DEST)."""
    if mark is None:
        return None
    seqs: list[int] = []
    for r in records:
        held = r.get(MARK_KEY)
        if (not isinstance(held, Mapping) or held.get("record") != mark["record"]
                or held.get("uid") != mark["uid"]):
            return None
        seq = held.get("seq")
        if not isinstance(seq, int) or not 0 <= seq <= mark["seq"]:
            return None  # a counter ahead of the record's: not this record's history
        seqs.append(seq)
    return min(seqs) if seqs else None


def changed_sidecars(dest: str, seq: int) -> SidecarPaths:
    """The sidecars of DEST's granules recorded after ``seq`` (failed ones left out) that are
    still there, by granule name (as :func:`~._cube_listing.list_sidecars` orders them)."""
    from h5sidecar.dest import open_record

    record = open_record(dest, create=False)
    try:
        paths = [s for _, s in record.changed_since(seq) if os.path.exists(s)]
    finally:
        record.close()
    return SidecarPaths(pa.array(paths, pa.string()))


def marked(record: dict[str, Any], mark: Mapping[str, Any] | None,
           coordinate: np.ndarray) -> None:
    """Put ``mark`` (and ``coordinate``'s first and last values, when finite numbers) into a
    cube's ``record`` as its last key, or take an old one out (``mark`` None): every writer
    puts it last, so an appended cube's record is the one a build writes."""
    record.pop(MARK_KEY, None)
    if mark is None or not coordinate.size:
        return
    entry: dict[str, Any] = {"record": mark["record"], "uid": mark["uid"], "seq": mark["seq"]}
    span = [coordinate[0].item(), coordinate[-1].item()]
    if all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
           for v in span):
        entry["span"] = span
    record[MARK_KEY] = entry


class MemberUrls(Sequence[str]):
    """A cube's member URLs, read from its (lazy) member table only when first used: an
    append that found nothing new names its members without reading them."""

    __slots__ = ("_members",)

    def __init__(self, members: Any) -> None:
        self._members = members

    def __len__(self) -> int:
        return len(self._members)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        urls = self._members.urls
        if isinstance(index, slice):
            out: list[str] = urls[index].to_pylist()
            return out
        url: str = urls[index].as_py()
        return url

    def __iter__(self) -> Iterator[str]:
        return iter(self._members.urls.to_pylist())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]
