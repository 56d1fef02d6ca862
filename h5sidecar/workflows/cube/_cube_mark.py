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

An object-store DEST's record is in parts (:mod:`h5sidecar.dest._record_parts`), whose rows
are keyed by the time their part was named (``part-<ns>-<uuid>``) and keep that key when
compacted.  Its mark is the largest key (``{"record": the parts' folder URL, "uid": None,
"key": ...}``), and an append asks the record cache for the rows keyed after it, less a
margin (:attr:`~h5sidecar.settings.RecordSettings.record_mark_margin_s`, an hour): a part
named before the mark but stored after it (a slow PUT, a writer whose clock is behind) is found
while it is within that margin.  A writer whose clock is further behind than that needs
``--recheck``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np
import pyarrow as pa

from h5sidecar.dest import is_remote
from h5sidecar.settings import RecordSettings, from_env
from h5sidecar.workflows.cube._cube_listing import SidecarPaths

__all__ = ["MARK_KEY", "MemberUrls", "changed_sidecars", "dest_mark", "marked", "since"]

#: The key of the mark in a cube's record.
MARK_KEY = "record_mark"


def dest_mark(sidecars: Any, opts: Mapping[str, Any] | None = None,
              record_settings: RecordSettings | None = None) -> dict[str, Any] | None:
    """The mark of ``sidecars``' record when it is a local DEST with a record that numbers its
    rows (``{"record": its real path, "uid": its id, "seq": the counter}``) or an object-store
    DEST with a record in parts (``{"record": the parts' URL, "uid": None, "key": the
    largest row key}``, read through the record cache of ``record_settings``), else None."""
    if not isinstance(sidecars, str | os.PathLike):
        return None
    if is_remote(os.fspath(sidecars)):
        return _remote_mark(os.fspath(sidecars), opts, record_settings)
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


def _remote_mark(dest: str, opts: Mapping[str, Any] | None,
                 settings: RecordSettings | None) -> dict[str, Any] | None:
    from h5sidecar.dest import has_parts, newest_key, parts_root, store_of

    fs, root = store_of(dest, opts)
    if not has_parts(fs, root):
        return None
    key = newest_key(fs, root, settings)
    if key is None:
        return None
    return {"record": f"{dest.split('://', 1)[0]}://{parts_root(root)}", "uid": None,
            "key": key}


def since(records: Sequence[Mapping[str, Any]], mark: Mapping[str, Any] | None
          ) -> int | str | None:
    """The counter every cube part's record was written at (the oldest of them), when each
    holds a mark of the same record as ``mark`` (its path and id: not a DEST removed and
    indexed anew at the same place); else None (list DEST)."""
    if mark is None:
        return None
    if "key" in mark:  # an object-store DEST's: the largest row key (a string)
        keys: list[str] = []
        for r in records:
            held = r.get(MARK_KEY)
            if (not isinstance(held, Mapping) or held.get("record") != mark["record"]
                    or held.get("uid") is not None):
                return None
            key = held.get("key")
            if not isinstance(key, str) or not key <= mark["key"]:
                return None  # a key after the record's newest: not this record's history
            keys.append(key)
        return min(keys) if keys else None
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


def changed_sidecars(dest: str, since: int | str, opts: Mapping[str, Any] | None = None,
                     record_settings: RecordSettings | None = None) -> SidecarPaths:
    """The sidecars of DEST's granules recorded after ``since`` (a local record's counter, or
    an object-store record's row key, less ``record_settings.record_mark_margin_s``; failed
    ones left out) that are still there, by granule name (as
    :func:`~._cube_listing.list_sidecars` orders them)."""
    if isinstance(since, str):
        from h5sidecar.dest import store_of, written_since

        settings = record_settings or from_env(RecordSettings)
        fs, root = store_of(dest, opts)
        rows = written_since(fs, root, _before(since, settings.record_mark_margin_s), settings)
        # not asked whether each is still there (a request each, in turn): one gone since is
        # left out when its stamp or identity is asked (_cube_classify)
        return SidecarPaths(pa.array([s for _, s in rows], pa.string()))
    from h5sidecar.dest import open_record

    record = open_record(dest, create=False)
    try:
        paths = [s for _, s in record.changed_since(since) if os.path.exists(s)]
    finally:
        record.close()
    return SidecarPaths(pa.array(paths, pa.string()))


def _before(key: str, seconds: float) -> str:
    """A row key ``seconds`` before ``key`` (``part-<20-digit ns>-<uuid>``): every key of a
    part named from then on sorts after it (a key of another shape: itself)."""
    digits = key[5:25]
    if seconds <= 0 or not (key.startswith("part-") and len(digits) == 20 and digits.isdigit()):
        return key
    return f"part-{max(int(digits) - int(seconds * 1e9), 0):020d}"


def marked(record: dict[str, Any], mark: Mapping[str, Any] | None,
           coordinate: np.ndarray) -> None:
    """Put ``mark`` (and ``coordinate``'s first and last values, when finite numbers) into a
    cube's ``record`` as its last key, or take an old one out (``mark`` None): every writer
    puts it last, so an appended cube's record is the one a build writes."""
    record.pop(MARK_KEY, None)
    if mark is None or not coordinate.size:
        return
    entry: dict[str, Any] = {"record": mark["record"], "uid": mark["uid"]}
    entry.update({k: mark[k] for k in ("seq", "key") if k in mark})
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
