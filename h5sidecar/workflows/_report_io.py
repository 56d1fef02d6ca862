"""Persistence of the run report: merge with the report already in DEST, write atomically, read.

Locally the JSON goes to a temporary file in DEST which then replaces ``_report.json``
(``os.replace``; temporaries a killed run left are swept); on object stores it is one PUT.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from h5sidecar._modes import follow_umask
from h5sidecar.errors import InvalidReferenceError
from h5sidecar.sources._urls import normalize_url
from h5sidecar.workflows._listing import DEFAULT_PATTERNS, filesystem, is_remote, join_url
from h5sidecar.workflows._report import REPORT_NAME, GranuleResult, RunReport

__all__ = ["merge_reports", "read_report", "write_merged_report", "write_report"]

log = logging.getLogger("h5sidecar.workflows")


def merge_reports(previous: RunReport | None, current: RunReport) -> RunReport:
    """``current`` with the granules of ``previous`` it did not process carried over.

    A report never shrinks: an interrupted run (or one over a narrower ``--pattern``) keeps
    the entries of granules it did not reach, whose sidecars are still in DEST.  A granule
    present in both takes ``current``'s entry, whatever its status.  ``roots`` accumulates
    every run's source root; counts cover the merged granules, ``complete`` and the options
    are ``current``'s.
    """
    if previous is None:
        return current  # empty roots stand for (source,)
    own_roots = current.roots or (current.source,)
    fresh = {g.url for g in current.granules}
    carried = [g for g in previous.granules if g.url not in fresh]
    roots = tuple(dict.fromkeys((*(previous.roots or (previous.source,)), *own_roots)))
    granules = tuple(sorted((*current.granules, *carried), key=lambda g: (g.name, g.url)))
    orphaned = tuple(g.name or g.url for g in carried if _listing_missed(current, g))
    return replace(current, granules=granules, roots=roots, carried_over=len(carried),
                   orphaned=orphaned)


def _listing_missed(current: RunReport, g: GranuleResult) -> bool:
    """Whether ``current``'s complete listing would have found ``g``'s source if it existed.

    A carried-over granule under the run's folder or prefix that matches its patterns was not
    listed, so its source is gone: its sidecar is an orphan (``h5sidecar prune`` removes it).
    Granules of other roots, other patterns or an interrupted run are merely not reached.
    """
    root = current.source.rstrip("/")
    if not current.complete or any(ch in root for ch in "*?[") or g.status == "failed":
        return False
    if not g.url.startswith(root + "/"):
        return False
    patterns = current.options.get("patterns") or DEFAULT_PATTERNS
    name = g.url.rsplit("/", 1)[-1]
    hidden = any(part.startswith(".") for part in g.url[len(root) + 1 :].split("/"))
    return not hidden and any(fnmatch.fnmatchcase(name, p) for p in patterns)


def write_report(
    report: RunReport,
    dest: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    merge: bool = True,
) -> str:
    """Write ``DEST/_report.json`` atomically and return its URL.

    With ``merge`` (the default) the report already in DEST is merged in first
    (:func:`merge_reports`), so granules this run did not process keep their entries.  A
    malformed earlier report is replaced (with a warning).  Two runs writing into one DEST at
    the same moment may lose each other's entries (last writer wins).

    Locally the JSON goes to a temporary file in the same folder which then replaces the report
    (``os.replace``), so a killed run never leaves half a report; on object stores it is a
    single PUT, which is atomic there.
    """
    return write_merged_report(report, dest, storage_options=storage_options, merge=merge)[0]


def write_merged_report(
    report: RunReport,
    dest: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    merge: bool = True,
) -> tuple[str, RunReport]:
    """:func:`write_report`, also returning the report as written (merged, with orphans)."""
    dest = normalize_url(dest)
    url = join_url(dest, REPORT_NAME)
    if merge:
        report = merge_reports(_previous(dest, storage_options), report)
    data = json.dumps(report.to_dict(), indent=1, allow_nan=False).encode()
    if is_remote(url):
        filesystem(url, storage_options).pipe_file(url, data)
        return url, report
    os.makedirs(dest, exist_ok=True)
    _sweep_stale_temporaries(dest)
    fd, tmp = tempfile.mkstemp(prefix="._report.", suffix=".tmp", dir=dest)
    try:
        follow_umask(tmp, fd=fd)  # mkstemp's 0600 would make the report private to its writer
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, url)
    except BaseException:
        # never leave the temporary file behind, whatever interrupted the write
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return url, report


def _previous(dest: str, storage_options: Mapping[str, Any] | None) -> RunReport | None:
    try:
        return read_report(dest, storage_options=storage_options)
    except FileNotFoundError:
        return None
    except InvalidReferenceError as exc:
        log.warning("%s; it is replaced by this run's report", exc)
        return None


def _sweep_stale_temporaries(dest: str, min_age: float = 60.0) -> None:
    """Remove report temporaries a killed run left (older than ``min_age`` seconds, so a
    concurrent run's report being written right now is never touched)."""
    now = time.time()
    for entry in os.scandir(dest):
        if entry.name.startswith("._report.") and entry.name.endswith(".tmp"):
            with contextlib.suppress(FileNotFoundError):
                if now - entry.stat().st_mtime > min_age:
                    os.unlink(entry.path)


def read_report(dest: str, *, storage_options: Mapping[str, Any] | None = None) -> RunReport:
    """Read ``DEST/_report.json``.

    Raises
    ------
    FileNotFoundError
        When there is no report.
    InvalidReferenceError
        When the report is not valid JSON or lacks fields.
    """
    url = join_url(normalize_url(dest), REPORT_NAME)
    raw = filesystem(url, storage_options).cat_file(url)
    try:
        return RunReport.from_dict(json.loads(raw))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidReferenceError(
            f"run report {url} is malformed ({exc}): delete it and re-run the batch"
        ) from exc
