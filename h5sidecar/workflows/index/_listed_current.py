"""Which listed granules DEST's record shows up to date, found in one SQL join.

A re-run's listing is staged in a private SQLite database (:class:`StagedListing`); DEST's
record is another SQLite database.  Comparing them granule by granule in Python (a batch of
rows looked up, each decoded from JSON into a result, its identity rebuilt and compared) was
most of a no-op re-run's time.  Here the record is attached to the staging database for one
statement that keeps the granules whose row decides them current: written ``ok`` (or found up
to date) for the sidecar this run would write, by a run whose content settings are this run's,
from the identity the listing sees.  What is left per granule in Python is one ``stat`` of the
sidecar's commit file (its stamp, as :func:`~._up_to_date.from_record` checks it).

The SQL decides only where the answer is certain: the identities' sizes are equal and their
ETags equal, or (without two ETags) their modification times in nanoseconds equal with no
inode or change time differing -- a case of :meth:`SourceInfo.same_object`.  Every other
granule (no row, another identity, times in float seconds only, a stamp that no longer
matches) goes the way it went before, through :func:`~._up_to_date.precheck`, so this changes how
fast a re-run decides, never what it decides.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from typing import Any

from h5sidecar.dest import SIDECAR_SUFFIX, join_url, sidecar_stamp
from h5sidecar.settings import IndexSettings
from h5sidecar.workflows.index._up_to_date import dmrpp_mode_serves, settings_differ
from h5sidecar.workflows.listing._listed_granule import Granule
from h5sidecar.workflows.listing._staged_listing import StagedListing, granule_of

__all__ = ["mark_current", "split_current"]

#: The table of the staging database that holds the granules the record shows current.
TABLE = "current"

#: A row's identity (``r.source``, JSON) is the listed one (``g``): see the module docstring.
_SAME_OBJECT = """
json_extract(r.source, '$.url') = g.url AND json_extract(r.source, '$.size') = g.size AND (
  (g.etag IS NOT NULL AND json_extract(r.source, '$.etag') = g.etag)
  OR ((g.etag IS NULL OR json_extract(r.source, '$.etag') IS NULL)
      AND coalesce(json_extract(r.source, '$.inode') = g.inode, 1)
      AND coalesce(json_extract(r.source, '$.ctime_ns') = g.ctime_ns, 1)
      AND json_extract(r.source, '$.mtime_ns') = g.mtime_ns))
"""


def mark_current(listing: StagedListing, record: str, dest: str, fmt: str,
                 settings: IndexSettings, from_dmrpp: str = "never") -> int:
    """Mark in ``listing``'s database (table ``current``: the staged row id and the
    recorded stamp of its sidecar) the granules whose row in the record at ``record`` shows
    them up to date for a run writing ``fmt`` sidecars under ``dest`` with ``settings``;
    returns how many.

    The record is attached for this one statement, read in one snapshot, and detached: a
    run's writes to it are not held up while the listing is then read.  On an SQLite without
    JSON functions nothing is marked (every granule is then checked as before).
    """
    db = listing.db
    db.execute(f"CREATE TABLE {TABLE} (gid INTEGER PRIMARY KEY, stamp TEXT NOT NULL)")
    db.execute("CREATE TABLE ok_runs (id INTEGER PRIMARY KEY)")
    db.execute("PRAGMA busy_timeout = 60000")
    db.execute("ATTACH DATABASE ? AS rec", (record,))
    try:
        db.execute("BEGIN")
        try:
            db.executemany("INSERT INTO ok_runs VALUES (?)", (
                (run,) for run, content in db.execute(
                    "SELECT id, content FROM rec.runs WHERE content IS NOT NULL")
                if _serves(content, settings, fmt, from_dmrpp)))
            # the sidecar this run would write (join_url's, DEST normalised), in SQL
            head = join_url(dest, "x")[:-1]
            sep = os.sep
            db.execute(
                f"INSERT INTO {TABLE} SELECT g.rowid, r.stamp FROM g "
                "JOIN rec.granules r ON r.url = g.url "
                "WHERE r.status IN ('ok', 'up_to_date') AND r.stamp IS NOT NULL "
                "AND r.source IS NOT NULL AND r.run IN (SELECT id FROM ok_runs) "
                "AND r.sidecar = ? || replace(g.name, '/', ?) || ? "
                f"AND {_SAME_OBJECT}", (head, sep, SIDECAR_SUFFIX[fmt]))
        except sqlite3.OperationalError as exc:
            if "json_extract" not in str(exc):
                raise
            db.execute(f"DELETE FROM {TABLE}")  # no JSON functions: nothing decided here
        finally:
            db.execute("COMMIT")
    finally:
        db.execute("DETACH DATABASE rec")
    return int(db.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])


def split_current(listing: StagedListing, dest: str, fmt: str
                  ) -> Iterator[tuple[str, str, str] | Granule]:
    """The granules of ``listing`` sorted by name, after :func:`mark_current`: for those
    marked whose sidecar's commit file still has its recorded stamp, ``(url, name,
    sidecar)``; for the others their :class:`Granule` (to check or index as before)."""
    head = join_url(dest, "x")[:-1]
    suffix = SIDECAR_SUFFIX[fmt]
    for stamp, name, fields in listing.marked(TABLE, "stamp"):
        if stamp is not None:
            sidecar = head + name.replace("/", os.sep) + suffix
            if sidecar_stamp(sidecar) == stamp:
                yield fields[0], name, sidecar
                continue
        yield granule_of(name, fields)


def _serves(content: str, settings: IndexSettings, fmt: str, from_dmrpp: str) -> bool:
    """Whether a run of ``content`` (``runs.content``) wrote what this run asks for (as
    :func:`~._up_to_date.from_record` decides it)."""
    try:
        doc: dict[str, Any] = json.loads(content)
    except ValueError:
        return False
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        return False
    if fmt == "parquet" and doc.get("layout") != settings.layout:
        return False
    if not dmrpp_mode_serves(doc.get("from_dmrpp"), from_dmrpp):  # None: ask each sidecar
        return False
    return not settings_differ(doc.get("settings"), settings)
