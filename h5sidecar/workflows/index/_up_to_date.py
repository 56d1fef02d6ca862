"""Is a granule's sidecar up to date?  What an existing sidecar records, read cheaply.

Deciding whether a granule is up to date must not cost as much as indexing it: loading a whole
Parquet sidecar of a ~1000-variable granule (every ``refs.N.parq``) takes seconds, while its
source identity sits in one small JSON document.  So we read only the h5sidecar extras block:
the top-level ``"h5sidecar"`` key of ``.zmetadata`` (Parquet; written last, so its presence
also means the sidecar is complete) or of the JSON sidecar.

With a record (a local DEST), not even that: the granule's row, and the content settings of
the run that wrote it, decide (:func:`from_record`), and one ``stat`` of the sidecar's commit
file (a Parquet sidecar's ``.zmetadata``, the JSON file) says it is still there.  A stat, not a
listing of DEST: it costs the same per granule (microseconds, measured) without holding a
million names in memory, and it works when DEST mirrors the source's folders.  The extras block
is read only for granules the record does not describe (no row: an old DEST, another tool).
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from h5sidecar.dest import GranuleResult, filesystem, is_remote, sidecar_stamp
from h5sidecar.errors import H5SidecarError, InvalidReferenceError
from h5sidecar.indexer import DMRPP_KEY
from h5sidecar.references import SourceInfo
from h5sidecar.settings import IndexSettings
from h5sidecar.workflows.index._executors import Task
from h5sidecar.workflows.listing._listing import identity_from_info

__all__ = [
    "CONTENT_SETTINGS",
    "Recorded",
    "check_up_to_date",
    "content_of",
    "dmrpp_mode_serves",
    "from_record",
    "precheck",
    "read_recorded",
    "settings_differ",
    "sidecar_bytes",
]

#: Tasks checked at once (bounds what a check holds, whatever the number of granules).
_BATCH = 2_000

#: ``urls -> (row as a GranuleResult, content of the run that wrote it)`` (``Record.lookup``).
Lookup = Callable[[Iterable[str]],
                  Iterator[tuple[GranuleResult, Mapping[str, Any] | None, str | None]]]

#: Threads checking sidecars before workers start (each check is one small read).
_CHECK_THREADS = 16

log = logging.getLogger("h5sidecar.workflows")

#: Top-level key of the extras block in both sidecar formats (kerchunk readers ignore it).
EXTRAS_KEY = "h5sidecar"


#: Indexer settings that change what a sidecar holds (the others only change how fast it is
#: made): a sidecar written with other values is not up to date for this run.
CONTENT_SETTINGS = (
    "on_unsupported",
    "inline_threshold",
    "contiguous_chunk_bytes",
    "materialize_limit",
    "checksums",
)


@dataclass(frozen=True, slots=True)
class Recorded:
    """The source identity, variable statuses and indexer settings a sidecar records."""

    source: SourceInfo
    n_virtual: int
    n_inlined: int
    skipped: tuple[Mapping[str, str], ...]
    settings: Mapping[str, Any] | None = None
    layout: str | None = None  # Parquet sidecars: "kerchunk" or "compact"; JSON: None
    from_dmrpp: bool = False  # indexed from the granule's DMR++ (``index_dmrpp``)


def dmrpp_mode_serves(recorded: str | None, asked: str) -> bool | None:
    """Whether sidecars a run wrote with ``--from-dmrpp recorded`` serve a run asking
    ``asked``; ``None`` when the run's mode does not tell (``auto``): ask each sidecar.

    ``auto`` takes a sidecar made either way (both describe the same granule; a DMR++ that
    appears later does not make a sidecar crawled from the HDF5 stale); ``never`` and ``only``
    are asked for what they name.  A run that did not record its mode is taken as ``never``
    (the default): its rows keep pointing at it, so asking every sidecar instead would cost
    a read per granule on every later run.
    """
    recorded = recorded or "never"
    if asked == "auto" or recorded == asked:
        return True
    return None if recorded == "auto" else False


def settings_differ(recorded: Mapping[str, Any] | None, settings: IndexSettings) -> list[str]:
    """The :data:`CONTENT_SETTINGS` whose recorded value does not give what ``settings`` asks
    for (all of them when the sidecar records none).

    Checksums are the one superset: a sidecar with checksums also serves a run that does not
    ask for them (re-indexing would only drop them); a run asking for them re-indexes a sidecar
    without.
    """
    if recorded is None:
        return list(CONTENT_SETTINGS)
    out = []
    for name in CONTENT_SETTINGS:
        want = getattr(settings, name)
        if name == "checksums":
            if want and not recorded.get(name):
                out.append(name)
        elif name not in recorded or recorded[name] != want:
            out.append(name)
    return out


def read_recorded(
    sidecar: str, *, storage_options: Mapping[str, Any] | None = None
) -> Recorded | None:
    """Read the recorded identity of ``sidecar``; None when absent, incomplete or unreadable.

    ``None`` means "index it (again)": no sidecar, a Parquet directory without its commit
    marker (an interrupted object-store write), a sidecar written by another tool (no extras),
    or a malformed one.
    """
    fs = filesystem(sidecar, storage_options)
    target = f"{sidecar.rstrip('/')}/.zmetadata" if sidecar.endswith(".parq") else sidecar
    try:
        raw = fs.cat_file(target)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    try:
        return _parse(json.loads(raw), parquet=sidecar.endswith(".parq"))
    except (ValueError, KeyError, TypeError, AttributeError, InvalidReferenceError) as exc:
        log.warning("sidecar %s is unreadable (%s): it will be rewritten", sidecar, exc)
        return None


def _parse(doc: Mapping[str, Any], *, parquet: bool = False) -> Recorded | None:
    extras = doc.get(EXTRAS_KEY)
    if extras is None:
        return None  # not written by h5sidecar: no identity to trust
    statuses = [a.get("status", "virtual") for a in extras.get("arrays", {}).values()]
    skipped = tuple(
        {"path": str(s["path"]), "kind": str(s["kind"]), "reason": str(s["reason"])}
        for s in extras.get("skipped", ())
    )
    extra = extras.get("extra", {})
    settings = extra.get("settings")
    return Recorded(
        source=SourceInfo.from_dict(extras["source"]),
        n_virtual=statuses.count("virtual"),
        n_inlined=statuses.count("inlined"),
        skipped=skipped,
        settings=settings if isinstance(settings, dict) else None,
        layout=str(extras.get("layout", "kerchunk")) if parquet else None,
        from_dmrpp=extra.get(DMRPP_KEY) is not None,
    )


def check_up_to_date(
    url: str,
    sidecar: str,
    listed: SourceInfo | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    settings: IndexSettings | None = None,
    from_dmrpp: str | None = None,
) -> GranuleResult | None:
    """An ``up_to_date`` result when ``sidecar`` records the current identity of ``url``
    (and was written with the same :data:`CONTENT_SETTINGS` as ``settings``, and made from
    the HDF5 or the DMR++ as ``from_dmrpp`` asks, when given).

    ``listed`` is the identity from the listing (looked up when None).  Returns None when the
    granule needs indexing: no sidecar, another source URL, a different size/ETag/mtime, or
    index options that change the sidecar's content (``--checksums`` added, another
    ``inline_threshold``, ...) or another Parquet layout, so that the report says what every
    sidecar holds.
    """
    t0 = time.perf_counter()
    if listed is None:
        listed = identity_from_info(url, filesystem(url, storage_options).info(url))
    rec = read_recorded(sidecar, storage_options=storage_options)
    if rec is None or rec.source.url != url or not rec.source.same_object(listed):
        return None
    changed = [] if settings is None else settings_differ(rec.settings, settings)
    if settings is not None and rec.layout is not None and rec.layout != settings.layout:
        changed.append(f"layout ({rec.layout}, now {settings.layout})")
    made = "only" if rec.from_dmrpp else "never"
    if from_dmrpp is not None and not dmrpp_mode_serves(made, from_dmrpp):
        changed.append(f"from_dmrpp (made {'from its DMR++' if rec.from_dmrpp else 'from the HDF5'}, "
                       f"now {from_dmrpp})")  # fmt: skip
    if changed:
        log.info("%s was indexed with other %s: indexing it again", sidecar, ", ".join(changed))
        return None
    seconds = {"check": time.perf_counter() - t0}
    seconds["total"] = seconds["check"]
    # n_chunks is not in the extras block; index_many carries it over from the last report
    return GranuleResult(
        url=url,
        sidecar=sidecar,
        status="up_to_date",
        source=rec.source.to_dict(),
        n_virtual=rec.n_virtual,
        n_inlined=rec.n_inlined,
        n_skipped=len(rec.skipped),
        skipped=rec.skipped,
        sidecar_bytes=sidecar_bytes(sidecar, storage_options),
        seconds=seconds,
    )


def content_of(settings: IndexSettings, fmt: str, from_dmrpp: str = "never") -> dict[str, Any]:
    """What a run records of the settings that shape its sidecars' content (``runs.content``
    of the record): the format, the Parquet layout, the :data:`CONTENT_SETTINGS` and
    ``--from-dmrpp``."""
    return {
        "format": fmt,
        "layout": settings.layout if fmt == "parquet" else None,
        "settings": {name: getattr(settings, name) for name in CONTENT_SETTINGS},
        "from_dmrpp": from_dmrpp,
    }


def from_record(row: GranuleResult, content: Mapping[str, Any], stamp: str, url: str,
                sidecar: str, listed: SourceInfo | None, settings: IndexSettings, fmt: str,
                from_dmrpp: str = "never") -> GranuleResult | None:
    """An ``up_to_date`` result (the row's counts) when the record shows ``url``'s sidecar
    current: the row was written ``ok`` for this sidecar from the identity the listing sees
    (``listed``), by a run whose ``content`` gives what ``settings`` and ``fmt`` ask for, and
    the sidecar's commit file is still the one recorded (``stamp``, one stat).  None: index
    it."""
    if (row.status not in ("ok", "up_to_date") or row.sidecar != sidecar or listed is None
            or row.source is None or content.get("format") != fmt):
        return None
    if fmt == "parquet" and content.get("layout") != settings.layout:
        return None
    if settings_differ(content.get("settings"), settings):
        return None
    if not dmrpp_mode_serves(content.get("from_dmrpp"), from_dmrpp):
        return None
    source = SourceInfo.from_dict(row.source)
    if source.url != url or not source.same_object(listed):
        return None
    if sidecar_stamp(sidecar) != stamp:  # deleted, or rewritten by something else since
        return None
    return replace(row, status="up_to_date", seconds={})


def precheck(
    tasks: Iterable[Task],
    *,
    storage_options: Mapping[str, Any] | None = None,
    lookup: Lookup | None = None,
) -> Iterator[GranuleResult | Task]:
    """Split ``index_one`` tasks into up-to-date results and the tasks still to run, yielded
    in batches of :data:`_BATCH` tasks taken from ``tasks`` as they are asked for (what it
    holds does not grow with their number).

    ``lookup`` (a local DEST's record) decides for the granules it has rows for, without
    reading their sidecars (:func:`from_record`); the others are checked from their sidecars'
    extras blocks, in threads of this process (small reads), so a re-run with nothing to do
    starts no worker process.  A check that fails leaves its task to run: ``index_one`` then
    records the failure properly.
    """

    def one(task: Task) -> GranuleResult | None:
        url, sidecar, options, listed = task.args[:4]
        try:
            return check_up_to_date(url, sidecar, listed, storage_options=storage_options,
                                    settings=options.settings, from_dmrpp=options.from_dmrpp)  # fmt: skip
        except (H5SidecarError, OSError) as exc:
            log.debug("cannot check %s (%s): indexing it", sidecar, exc)
            return None

    pool = ThreadPoolExecutor(_CHECK_THREADS)
    it = iter(tasks)
    try:
        while batch := list(itertools.islice(it, _BATCH)):
            decided: dict[str, GranuleResult | None] = {}
            if lookup is not None:
                options = batch[0].args[2]
                by_url = {t.url: t for t in batch}
                for row, content, stamp in lookup(by_url):
                    if content is None or stamp is None:
                        continue  # written by an import or a version-1 run: ask the sidecar
                    if dmrpp_mode_serves(content.get("from_dmrpp"), options.from_dmrpp) is None:
                        continue  # the run's mode does not say how this one was made: ask it
                    task = by_url[row.url]
                    decided[row.url] = from_record(row, content, stamp, task.url, task.sidecar,
                                                   task.args[3], options.settings,
                                                   options.format, options.from_dmrpp)
            unknown = [t for t in batch if t.url not in decided]
            decided.update(zip((t.url for t in unknown), pool.map(one, unknown), strict=True))
            for task in batch:
                yield decided[task.url] or task
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def sidecar_bytes(sidecar: str, storage_options: Mapping[str, Any] | None = None) -> int:
    """Size of a sidecar (all files of a Parquet directory)."""
    fs = filesystem(sidecar, storage_options)
    path = sidecar.split("://", 1)[1] if is_remote(sidecar) else sidecar
    return int(fs.du(path, total=True)) if fs.isdir(path) else int(fs.size(path))
