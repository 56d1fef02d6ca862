"""``h5sidecar prune DEST``: find (and, when asked, remove) what no reader needs any more.

Three kinds of leftovers build up in a DEST that is indexed again and again:

- **orphaned**: a sidecar whose source granule no longer exists (deleted or moved upstream);
- **other_format**: a granule's sidecar in the format it is no longer indexed in (after a
  switch of ``--format``, both ``NAME.json`` and ``NAME.parq`` exist; the one the run report
  names is kept);
- **staging**: temporaries of atomic writes (``.NAME.*.tmp``) that an interrupted process left
  behind, older than ``staging_age`` seconds (younger ones may belong to a running ``index``).

Nothing is removed unless ``apply=True``: the default is a dry run that lists what would go.
Removing sidecars also removes their entries from the run report (DEST's record).  Datacubes in DEST are never
pruned (a cube whose member disappeared is refused on read, by name).

``prune`` and a concurrent ``index`` cannot destroy each other's work: with ``apply=True`` prune
holds DEST's exclusive lock (a local DEST; it waits for running index runs, see
:mod:`h5sidecar.dest._dest_lock`), and it never removes a sidecar written after the run
report it decided from (an index run writes its sidecars first and its report last; this guard
holds on object stores too, which have no lock).
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from h5sidecar.dest import (
    RECORD_NAME,
    REPORT_NAME,
    GranuleResult,
    Mirror,
    RunReport,
    StagedSidecars,
    dest_lock,
    entry_mtime,
    filesystem,
    forget_sidecars,
    has_parts,
    is_remote,
    newest_part_mtime,
    open_record,
    read_report,
    record_path,
    store_of,
    walk_dest,
)
from h5sidecar.errors import H5SidecarError, InvalidRequestError, SourceNotFoundError
from h5sidecar.read import load_refs
from h5sidecar.settings import RecordSettings
from h5sidecar.sources import normalize_url

__all__ = ["PruneEntry", "PruneResult", "prune"]

PruneReason = Literal["orphaned", "other_format", "staging"]
REASONS: tuple[PruneReason, ...] = ("orphaned", "other_format", "staging")
#: Source existence checks running at once (each is one HEAD or stat).
EXISTS_THREADS = 16
_SUFFIXES = {".json": "json", ".parq": "parquet"}


@dataclass(frozen=True, slots=True)
class PruneEntry:
    """One thing ``prune`` found.

    Attributes
    ----------
    path : str
        The sidecar or temporary (URL or local path).
    reason : "orphaned", "other_format" or "staging"
    detail : str
        Why, in words (the missing source, the format kept, the age).
    name : str
        Granule name (relative to DEST), when it is a sidecar.
    removed : bool
        True once removed (``apply=True``).
    """

    path: str
    reason: PruneReason
    detail: str
    name: str = ""
    removed: bool = False


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What ``prune`` found, and whether it removed it."""

    dest: str
    entries: tuple[PruneEntry, ...]
    applied: bool
    sidecars_checked: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``h5sidecar prune --json``)."""
        return {
            "dest": self.dest,
            "applied": self.applied,
            "sidecars_checked": self.sidecars_checked,
            "entries": [asdict(e) for e in self.entries],
        }


def prune(
    dest: str,
    *,
    apply: bool = False,
    reasons: tuple[str, ...] = REASONS,
    staging_age: float = 3600.0,
    storage_options: Mapping[str, Any] | None = None,
    source_storage_options: Mapping[str, Any] | None = None,
    record_settings: RecordSettings | None = None,
) -> PruneResult:
    """Find orphaned sidecars, sidecars in a format no longer used, and staging leftovers.

    Parameters
    ----------
    dest : str
        A DEST folder or ``s3://`` prefix written by ``h5sidecar index``.
    apply : bool
        Remove what was found (default: only list it).
    reasons : tuple of str
        Which kinds to look for (default all three).
    staging_age : float
        Temporaries younger than this (seconds) are left alone: a running ``index`` owns them.
    storage_options, source_storage_options : mapping, optional
        fsspec options for DEST, and for the sources (default: DEST's).
    record_settings : RecordSettings, optional
        The record cache an object-store DEST's record is read through (default:
        ``from_env(RecordSettings)``).

    Raises
    ------
    SourceNotFoundError
        DEST does not exist.
    InvalidRequestError
        DEST holds no sidecar, temporary or record: it is not a DEST.
    """
    unknown = set(reasons) - set(REASONS)
    if unknown:
        raise ValueError(f"unknown prune reason(s) {sorted(unknown)}; choose from {REASONS}")
    dest = normalize_url(dest)
    fs = filesystem(dest, storage_options)
    fs.invalidate_cache()  # list what is there now, not what this process saw earlier
    root = dest.split("://", 1)[-1].rstrip("/") if is_remote(dest) else dest.rstrip("/")
    if not fs.exists(root):
        raise SourceNotFoundError(f"{dest} does not exist: pass the DEST of h5sidecar index")
    _refuse_not_a_dest(fs, dest, root, storage_options)  # before a lock file is written there
    if not apply:  # a dry run removes nothing: it need not wait for a running index
        return _prune(fs, dest, root, False, reasons, staging_age, storage_options,
                      source_storage_options, record_settings)  # fmt: skip
    with dest_lock(dest, exclusive=True, holder="prune --apply"):
        return _prune(fs, dest, root, True, reasons, staging_age, storage_options,
                      source_storage_options, record_settings)  # fmt: skip


def _refuse_not_a_dest(fs: Any, dest: str, root: str,
                       storage_options: Mapping[str, Any] | None) -> None:
    """Raise :class:`InvalidRequestError` when ``dest`` holds neither a record of ``h5sidecar
    index``, nor a sidecar, nor a temporary (a folder of granules, given by mistake)."""
    if is_remote(dest):
        store, where = store_of(dest, storage_options)
        if has_parts(store, where):
            return
    elif os.path.exists(record_path(dest)):
        return
    if fs.exists(f"{root}/{REPORT_NAME}") or next(iter(walk_dest(fs, root, is_remote(dest))),
                                                     None) is not None:
        return
    raise InvalidRequestError(
        f"{dest} is not a DEST: it holds no sidecars and no record of `h5sidecar index`; pass "
        "the folder (or prefix) given to `h5sidecar index -o`")


def _prune(fs: Any, dest: str, root: str, apply: bool, reasons: tuple[str, ...],
           staging_age: float, storage_options: Mapping[str, Any] | None,
           source_storage_options: Mapping[str, Any] | None,
           record_settings: RecordSettings | None) -> PruneResult:  # fmt: skip
    """:func:`prune` once DEST is known to exist (and, to apply, locked)."""
    prefix = dest.split("://", 1)[0] + "://" if is_remote(dest) else ""
    # read before the report: a sidecar committed after this moment is not removed
    decided_at = _report_mtime(fs, root)
    if decided_at is None:
        decided_at = time.time()
    temporaries: list[tuple[str, float | None]] = []
    with StagedSidecars() as sidecars:
        for path, temporary in walk_dest(fs, root, is_remote(dest)):
            if temporary is not None:
                temporaries.append((path, temporary()))
                continue
            stem, suffix = posixpath.splitext(posixpath.relpath(path, root))
            sidecars.add(stem, _SUFFIXES[suffix], prefix + path)
        entries, recorded = _decide(fs, dest, prefix, sidecars, temporaries, reasons,
                                    staging_age, storage_options, source_storage_options,
                                    record_settings)
        checked = len(sidecars)
    if apply:
        entries = [_remove(fs, e, prefix, decided_at) for e in entries]
        if recorded.exists:
            _drop_from_report(recorded.report, dest, entries, storage_options, record_settings)
    return PruneResult(dest, tuple(entries), apply, checked)


def _decide(fs: Any, dest: str, prefix: str, sidecars: StagedSidecars,
            temporaries: list[tuple[str, float | None]], reasons: tuple[str, ...],
            staging_age: float, storage_options: Mapping[str, Any] | None,
            source_storage_options: Mapping[str, Any] | None,
            record_settings: RecordSettings | None) -> tuple[list[PruneEntry], _Recorded]:
    """What is to go among the ``sidecars`` and ``temporaries`` found, with what DEST's
    report says of them (read after the walk)."""
    entries: list[PruneEntry] = []
    if "staging" in reasons:
        now = time.time()
        for path, mtime in temporaries:
            age = now - mtime if mtime is not None else None
            if age is not None and age >= staging_age:
                entries.append(PruneEntry(prefix + path, "staging", "temporary of an "
                                          f"interrupted write, {age / 3600:.1f} h old"))
    other: list[PruneEntry] = []
    orphans: list[PruneEntry] = []
    with _recorded(dest, storage_options, record_settings) as recorded:
        # a batch of names at a time: what is held is one batch, and what was found
        for batch in sidecars.batches():
            by_name = recorded.lookup([name for name, _ in batch])
            kept: dict[str, str] = {}
            for name, found in batch:
                keep = _format_kept(name, found, by_name, fs, prefix)
                kept[name] = found[keep]
                for fmt, path in found.items():
                    if fmt != keep and "other_format" in reasons:
                        other.append(PruneEntry(path, "other_format", "the granule is "
                                                f"indexed as {keep} ({found[keep]})", name))
            if "orphaned" in reasons:
                orphans.extend(_orphans(kept, by_name, storage_options,
                                        source_storage_options or storage_options))
    return entries + other + orphans, recorded


# -- finding ----------------------------------------------------------------------------------
@dataclass
class _Recorded:
    """What DEST's report says of the granules of some names (``lookup``), whether it has one
    (``exists``), and the report itself when it is ``_report.json`` (read whole)."""

    lookup: Callable[[list[str]], Mapping[str, GranuleResult]]
    exists: bool
    report: RunReport | None = None


@contextlib.contextmanager
def _recorded(dest: str, storage_options: Mapping[str, Any] | None,
              record_settings: RecordSettings | None) -> Iterator[_Recorded]:
    """DEST's report, queried by name: a local record in batches from one read snapshot (its
    granules are never all held), an object store's parts the same way once loaded into a
    temporary database, else ``_report.json``, read whole."""
    fs, root = store_of(dest, storage_options) if is_remote(dest) else (None, "")
    if fs is not None and has_parts(fs, root):
        with Mirror(fs, root, settings=record_settings) as mirror, mirror.record.reading():
            yield _Recorded(mirror.record.by_names, exists=True)
        return
    if not is_remote(dest) and os.path.exists(record_path(dest)):
        record = open_record(dest, create=False)
        try:
            with record.reading():
                yield _Recorded(record.by_names, exists=True)
        finally:
            record.close()
        return
    report = _report(dest, storage_options, record_settings)
    by_name = {g.name: g for g in report.granules} if report else {}
    yield _Recorded(lambda names: by_name, exists=report is not None, report=report)


def _report(dest: str, storage_options: Mapping[str, Any] | None,
            record_settings: RecordSettings | None) -> RunReport | None:
    try:
        return read_report(dest, storage_options=storage_options, record_settings=record_settings)
    except FileNotFoundError:
        return None


def _format_kept(name: str, found: Mapping[str, str], by_name: Mapping[str, Any], fs: Any,
                 prefix: str) -> str:
    """The format the report names for ``name``; without one, the newer sidecar's."""
    if len(found) == 1:
        return next(iter(found))
    entry = by_name.get(name)
    if entry is not None:
        for fmt, path in found.items():
            if normalize_url(path) == normalize_url(entry.sidecar):
                return fmt
    return max(found, key=lambda fmt: _committed(fs, found[fmt][len(prefix):]) or 0.0)


def _committed(fs: Any, path: str) -> float | None:
    """When the sidecar at ``path`` (no scheme) was last written: its file's mtime, a Parquet
    sidecar's ``.zmetadata`` (written last, its commit marker); None when gone."""
    target = f"{path}/.zmetadata" if path.endswith(".parq") else path
    try:
        return entry_mtime(fs.info(target))
    except (FileNotFoundError, NotADirectoryError):
        return None


def _report_mtime(fs: Any, root: str) -> float | None:
    """When DEST's report was last written: its JSON, a local record (whose log is written
    at each granule's commit), or the newest part of an object-store record."""
    times = [newest_part_mtime(fs, root)]
    for name in (REPORT_NAME, RECORD_NAME, RECORD_NAME + "-wal"):
        try:
            times.append(entry_mtime(fs.info(f"{root}/{name}")))
        except FileNotFoundError:
            continue
    return max((t for t in times if t is not None), default=None)


def _orphans(kept: Mapping[str, str], by_name: Mapping[str, Any],
             storage_options: Mapping[str, Any] | None,
             source_options: Mapping[str, Any] | None) -> list[PruneEntry]:
    def source_of(item: tuple[str, str]) -> tuple[str, str, str | None]:
        name, sidecar = item
        entry = by_name.get(name)
        if entry is not None and entry.status != "failed":
            return name, sidecar, entry.url
        try:
            refs = load_refs(sidecar, storage_options=dict(storage_options or {}))
        except (H5SidecarError, OSError, json.JSONDecodeError):
            return name, sidecar, None  # unreadable: not ours to judge here (inspect says why)
        return name, sidecar, None if refs.members else refs.source.url

    def exists(url: str) -> bool:
        try:
            return bool(filesystem(url, source_options).exists(_path(url)))
        except FileNotFoundError:
            return False

    with ThreadPoolExecutor(EXISTS_THREADS) as pool:
        sources = list(pool.map(source_of, kept.items()))
        checks = [(n, s, u) for n, s, u in sources if u]
        # a listing cached by this process (an index run just before) must not vouch for a
        # source deleted since: ask the store
        samples = {u.split("://", 1)[0]: u for _, _, u in checks if u and is_remote(u)}
        for url in samples.values():
            filesystem(url, source_options).invalidate_cache()
        present = list(pool.map(lambda t: exists(t[2]), checks))
    return [PruneEntry(sidecar, "orphaned", f"its source {url} no longer exists", name)
            for (name, sidecar, url), there in zip(checks, present, strict=True) if not there]


def _path(url: str) -> str:
    return url.split("://", 1)[1] if is_remote(url) else url.removeprefix("file://")


# -- removing ---------------------------------------------------------------------------------
def _remove(fs: Any, e: PruneEntry, prefix: str, decided_at: float) -> PruneEntry:
    """Remove ``e``, unless it is a sidecar committed after ``decided_at`` (the run report's
    mtime when prune read it): then an index run wrote it since, and the report prune
    decided from does not describe it yet."""
    target = e.path[len(prefix):]
    if e.reason != "staging":
        written = _committed(fs, target)
        if written is not None and written > decided_at:
            return replace(e, detail=f"{e.detail}; kept: written after the run report prune "
                                     "read (an index run is writing to DEST)")  # fmt: skip
    with contextlib.suppress(FileNotFoundError):  # gone meanwhile: the goal is reached
        fs.rm(target, recursive=True)
    return replace(e, removed=True)


def _drop_from_report(report: RunReport | None, dest: str, entries: list[PruneEntry],
                      storage_options: Mapping[str, Any] | None,
                      record_settings: RecordSettings | None) -> None:
    gone = [e.path for e in entries if e.removed and e.reason != "staging"]
    if gone:
        forget_sidecars(report, dest, gone, storage_options=storage_options,
                        record_settings=record_settings)
