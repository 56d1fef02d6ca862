"""Writing the record of an object-store DEST: a run's rows buffered and written as parts.

A run's rows (results and tombstones) are written as one part (:mod:`._record_parts`) every
:data:`FLUSH_GRANULES` granules or :data:`FLUSH_SECONDS` seconds and at the end of the run
(:class:`PartsWriter`); reading them back is :mod:`._record_store`.

Migration: an object-store DEST written by an earlier version holds ``_report.json``.  The
first write of this version copies it into the oldest possible part (its rows lose to every
later row), then renames it ``_report.json.migrated`` (kept for audit, never read again), as a
local DEST's migration does.  Only a DEST without parts is migrated, and readers read the parts
once there are any: a run killed between the two steps, or a store that cannot rename (no
server-side copy), leaves a ``_report.json`` that is no longer read.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pyarrow as pa

from h5sidecar.dest._locations import REPORT_NAME
from h5sidecar.dest._record_db import MIGRATED_SUFFIX
from h5sidecar.dest._record_parts import SCHEMA, list_parts, part_key, parts_root, write_part
from h5sidecar.dest._report import GranuleResult, RunReport, source_roots

__all__ = ["FLUSH_GRANULES", "FLUSH_SECONDS", "PartsWriter", "header_of", "migrate"]

log = logging.getLogger("h5sidecar.workflows")

#: A run writes its rows as a part every this many granules (a kill loses at most these)...
FLUSH_GRANULES = 1_000
#: ... or every this many seconds, whichever comes first.
FLUSH_SECONDS = 60.0


def _row(result: GranuleResult, key: str, run: str) -> dict[str, Any]:
    """A part's row of ``result`` (the columns hold what the local record's do)."""
    return {
        "key": key, "url": result.url, "name": result.name, "sidecar": result.sidecar,
        "status": result.status,
        "source": None if result.source is None else json.dumps(dict(result.source)),
        "source_url": None if result.source is None else result.source.get("url"),
        "n_virtual": result.n_virtual, "n_inlined": result.n_inlined,
        "n_skipped": result.n_skipped, "skipped": json.dumps([dict(s) for s in result.skipped]),
        "n_chunks": result.n_chunks, "sidecar_bytes": result.sidecar_bytes,
        "seconds": json.dumps(dict(result.seconds)),
        "error": None if result.error is None else json.dumps(result.error.to_dict()),
        "run": run, "deleted": False,
    }


def _tombstone(url: str, key: str, run: str) -> dict[str, Any]:
    return {"key": key, "url": url, "name": "", "sidecar": "", "status": "", "n_virtual": 0,
            "n_inlined": 0, "n_skipped": 0, "skipped": "[]", "n_chunks": 0,
            "sidecar_bytes": 0, "seconds": "{}", "run": run, "deleted": True}


def header_of(report: RunReport, uid: str, key: str, *, content: Mapping[str, Any] | None = None,
              confirmed: int = 0) -> dict[str, Any]:
    """A run's header as parts record it (its report's fields, no granules)."""
    doc = report.to_dict()
    for k in ("granules", "counts", "omitted"):
        doc.pop(k, None)
    return {"uid": uid, "key": key, "report": doc,
            "content": None if content is None else dict(content), "confirmed": confirmed}


class PartsWriter:
    """Writes rows (results and tombstones) to DEST as parts, :data:`FLUSH_GRANULES` rows or
    :data:`FLUSH_SECONDS` seconds at a time, each part with its run's header."""

    def __init__(self, fs: Any, root: str, uid: str | None = None) -> None:
        self.fs, self.root = fs, root
        self.uid = uid or uuid.uuid4().hex
        self._rows: list[GranuleResult | str] = []
        self._since = time.monotonic()
        #: Parts written (paths), oldest first.
        self.written: list[str] = []

    def add(self, result: GranuleResult | str) -> bool:
        """Buffer a result (a URL: its tombstone); returns whether the buffer is due to be
        written (:meth:`due`)."""
        self._rows.append(result)
        return self.due()

    def due(self) -> bool:
        """Whether enough rows, or enough time, have gathered since the last part."""
        return bool(self._rows) and (len(self._rows) >= FLUSH_GRANULES
                                     or time.monotonic() - self._since >= FLUSH_SECONDS)

    def flush(self, header: Mapping[str, Any] | None, *, always: bool = False,
              key: str | None = None) -> str | None:
        """Write the buffered rows (and ``header``, this run's, stamped with the part's key) as
        one part; nothing without rows unless ``always``.  Returns the part's path."""
        if not self._rows and not always:
            return None
        key = key or part_key()
        rows = [_tombstone(r, key, self.uid) if isinstance(r, str) else _row(r, key, self.uid)
                for r in self._rows]
        runs = [] if header is None else [{**header, "uid": self.uid, "key": key}]
        roots = [] if header is None else list(source_roots(
            header["report"].get("roots") or (), header["report"]["source"],
            header["report"].get("options") or {}))
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        path = write_part(self.fs, self.root, key, table, {"runs": runs, "roots": roots})
        self._rows.clear()
        self._since = time.monotonic()
        self.written.append(path)
        return path


def migrate(fs: Any, root: str, read_json: Any) -> bool:
    """Copy DEST's ``_report.json`` (``read_json()`` reads it) into the oldest part and rename
    it, when DEST has no parts yet; returns whether it did.  A malformed one is left in place
    (warned), as is one the store cannot rename (a store without server-side copy)."""
    old = f"{root}/{REPORT_NAME}"
    if not fs.exists(old) or list_parts(fs, root):
        return False
    report = read_json()
    if report is None:
        return False
    writer = PartsWriter(fs, root, uid=f"base-{uuid.uuid4().hex}")
    for g in report.granules:
        writer.add(g)
    key = part_key(base=True)
    writer.flush(header_of(replace(report, granules=()), writer.uid, key), always=True, key=key)
    try:
        fs.mv(old, old + MIGRATED_SUFFIX)
    except FileNotFoundError:
        pass  # a concurrent first run renamed it first
    except (OSError, NotImplementedError) as exc:
        # once DEST has parts, nothing reads it again: kept as it is
        log.warning("%s/%s is migrated but could not be renamed (%s): it is not read again",
                    root, REPORT_NAME, exc)
    log.info("migrated %s/%s into the parts of %s", root, REPORT_NAME, parts_root(root))
    return True
