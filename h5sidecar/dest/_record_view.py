"""The gateway's read-only view of a local DEST's record (``DEST/_h5sidecar.sqlite``).

A DEST with a record is served from it, not from a listing: a granule is looked up by name in
the record's ``granules_by_name`` index (O(log N) per request, nothing held per granule), pages
of names come from the same index, and what changed is seen at once (runs commit row by row;
WAL lets the gateway read while they write).  So the gateway starts, and stays, in memory and
time independent of the number of granules.

The schema is :mod:`._record_sql`'s; this module reads its ``roots`` table and
``granules(url, name, sidecar, status, source)`` by status, the columns that module keeps stable.

Connections are read-only (``mode=ro``), one per thread (sqlite3 objects are not shared between
threads), and made again when the file at the record's path is replaced or removed, so a
removed record is reported (:meth:`RecordView.probe`) instead of read through a deleted inode.
Every call is blocking: call them from a thread in async code.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from h5sidecar.errors import (
    ForbiddenSourceError,
    H5SidecarError,
    InvalidReferenceError,
    SourceReadError,
)
from h5sidecar.sources import AllowList, SourceLocation, parse_url

__all__ = ["Located", "RecordAllowList", "RecordView"]

log = logging.getLogger("h5sidecar.gateway")

#: Seconds :meth:`RecordView.recount` waits for a count before going on without it.
COUNT_WAIT_SECONDS = 0.1
#: Statuses of granules the record says have a good sidecar.
SERVED = ("ok", "up_to_date")
_SERVED_SQL = "status IN ('ok', 'up_to_date')"
#: Seconds a query waits for a writer's lock (WAL readers rarely wait: only while a checkpoint
#: resets the log) before the request fails instead of hanging.
BUSY_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Located:
    """A granule found in the record.

    Attributes
    ----------
    name : str
        Its name (path of its sidecar below DEST without the sidecar suffix).
    suffix : str
        ``".parq"`` or ``".json"``: the format of its sidecar.
    source : str
        Its source URL, as recorded.
    """

    name: str
    suffix: str
    source: str


def _source_url(url: str, source: str | None) -> str:
    # the source identity's URL when recorded (as the JSON report gave it), else the row's key
    try:
        given = (json.loads(source) if source else {}).get("url")
    except (ValueError, AttributeError):
        given = None
    return given if isinstance(given, str) and given else url


def safe_name(name: str) -> bool:
    """Whether ``name`` names a path below DEST (no ``..``, no absolute or hidden segment)."""
    parts = name.split("/")
    return bool(name) and all(p and not p.startswith((".", "_")) for p in parts)


class RecordView:
    """Read-only queries on the record at ``path`` (the record of DEST ``dest``).

    Parameters
    ----------
    path : str
        Local path of ``_h5sidecar.sqlite``.
    dest : str
        DEST as given to the gateway (for messages).
    """

    def __init__(self, path: str, dest: str) -> None:
        self.path = path
        self.dest = dest
        self._local = threading.local()
        self.counted: int | None = None  # granules at the last count (None before it)
        self._count_marker: tuple[tuple[int, int], ...] = ()
        self._counting: threading.Event | None = None

    # -- connections -------------------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise SourceReadError(
                f"the record {self.path} of DEST {self.dest} is gone ({exc}): the gateway "
                "cannot serve until it is back (re-run `h5sidecar index` into DEST)"
            ) from exc
        ident = (st.st_dev, st.st_ino)
        db = getattr(self._local, "db", None)
        if db is None or self._local.ident != ident:  # first use, or the file was replaced
            if db is not None:
                db.close()
            db = sqlite3.connect(f"file:{quote(self.path)}?mode=ro", uri=True,
                                 timeout=BUSY_SECONDS, check_same_thread=False)  # fmt: skip
            self._local.db, self._local.ident = db, ident
        return db

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        try:
            return self._db().execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise SourceReadError(f"the record of DEST {self.dest} is busy ({exc}): "
                                      "retry") from exc  # fmt: skip
            raise self._unreadable(exc) from exc
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from exc

    def _unreadable(self, exc: Exception) -> InvalidReferenceError:
        return InvalidReferenceError(
            f"the record {self.dest}/{os.path.basename(self.path)} is unreadable ({exc}): re-run "
            "`h5sidecar index` into DEST, or pass the source prefixes with --allow"
        )

    # -- queries -----------------------------------------------------------------------------
    def probe(self) -> None:
        """Raise unless the record can be read now (one row of each table)."""
        self._query("SELECT 1 FROM roots LIMIT 1")
        self._query("SELECT 1 FROM granules LIMIT 1")

    def roots(self) -> tuple[str, ...]:
        """The source root of every run merged into DEST."""
        return tuple(r for (r,) in self._query("SELECT root FROM roots ORDER BY seq")
                     if isinstance(r, str) and r)  # fmt: skip

    def count(self) -> int:
        """Granules with a good sidecar (a scan of the name index: call it rarely)."""
        return int(self._query(f"SELECT count(DISTINCT name) FROM granules WHERE {_SERVED_SQL}")[0][0])

    def recount(self) -> int | None:
        """Count the granules again if the record changed; the last count (see :attr:`counted`).

        Counting scans the record (~2 s at a million granules), so it runs in a thread of its
        own, waited for briefly (small records have their count at once).
        """
        try:
            marker = tuple((st.st_mtime_ns, st.st_size) for st in
                           (os.stat(p) for p in (self.path, self.path + "-wal")
                            if os.path.exists(p)))  # fmt: skip
        except OSError:
            marker = ()
        if self._counting is None and (marker != self._count_marker or not marker):
            self._count_marker = marker
            done = self._counting = threading.Event()

            def count() -> None:
                try:
                    self.counted = self.count()
                except H5SidecarError as exc:  # reported by /healthz (probe)
                    log.warning("counting the granules of DEST %s failed: %s", self.dest, exc)
                finally:
                    self._counting = None
                    done.set()

            threading.Thread(target=count, name="h5sidecar-count", daemon=True).start()
        pending = self._counting
        if pending is not None:
            pending.wait(COUNT_WAIT_SECONDS)
        return self.counted

    def locate(self, names: Iterable[str]) -> Located | None:
        """The longest of ``names`` recorded with a good sidecar (one indexed query)."""
        wanted = [n for n in dict.fromkeys(names) if safe_name(n)]
        if not wanted:
            return None
        marks = ",".join("?" * len(wanted))
        rows = self._query(
            f"SELECT name, sidecar, url, source FROM granules WHERE name IN ({marks}) AND "
            f"{_SERVED_SQL} ORDER BY length(name) DESC, url LIMIT 1", wanted,
        )  # fmt: skip
        if not rows:
            return None
        name, sidecar, url, source = rows[0]
        suffix = ".json" if str(sidecar).endswith(".json") else ".parq"
        return Located(name, suffix, _source_url(url, source))

    def page(self, after: str, limit: int, *, prefix: str = "", contains: str = "") -> list[str]:
        """Up to ``limit`` names after ``after`` in code-point order, starting with ``prefix``
        (a range of the name index) and holding ``contains`` (a scan, stopped at ``limit``)."""
        sql = f"SELECT DISTINCT name FROM granules WHERE {_SERVED_SQL} AND name > ?"
        params: list[object] = [after]
        if prefix:
            # every string starting with prefix sorts in [prefix, prefix + U+10FFFF)
            sql += " AND name >= ? AND name < ?"
            params += [prefix, prefix + "\U0010ffff"]
        if contains:
            sql += " AND instr(name, ?) > 0"
            params.append(contains)
        rows = self._query(sql + " ORDER BY name LIMIT ?", [*params, limit])
        return [n for (n,) in rows]

    def is_source(self, *urls: str) -> bool:
        """Whether one of ``urls`` is the source of a granule recorded with a good sidecar
        (the key of the ``granules`` table: O(log N))."""
        wanted = list(dict.fromkeys(urls))
        marks = ",".join("?" * len(wanted))
        rows = self._query(f"SELECT url, source FROM granules WHERE url IN ({marks}) AND "
                           f"{_SERVED_SQL}", wanted)  # fmt: skip
        return any(_source_url(u, s) in wanted or u in wanted for u, s in rows)


class RecordAllowList(AllowList):
    """The allow-list of a DEST with a record: its prefixes (the runs' source roots, ``--allow``),
    and the source of any granule the record holds, looked up when a URL is outside the prefixes
    (instead of loading every source URL: a million of them at startup)."""

    def __init__(self, prefixes: Iterable[str], record: RecordView) -> None:
        super().__init__(prefixes)
        self._record = record

    def _recorded(self, url: str) -> bool:
        try:
            canon = parse_url(url, untrusted=True).url
        except (ForbiddenSourceError, InvalidReferenceError):
            return False
        return self._record.is_source(url, canon)

    def allows(self, url: str) -> bool:
        """True when ``url`` lies under a prefix or is a recorded granule's source."""
        return super().allows(url) or self._recorded(url)

    def check(self, url: str) -> SourceLocation:
        """As :meth:`AllowList.check`, a recorded granule's source allowed too."""
        try:
            return super().check(url)
        except ForbiddenSourceError:
            if self._recorded(url):
                return parse_url(url, untrusted=True)
            raise
