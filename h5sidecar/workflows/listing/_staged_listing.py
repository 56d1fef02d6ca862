"""A listing of granules staged on disk, read back by name in batches.

A listing of a million granules held as Python objects costs about a gigabyte, and sorting it
needs all of it at once.  :class:`StagedListing` keeps it in a private temporary SQLite
database (an on-disk file SQLite deletes when it is closed; it stays in SQLite's page cache of
a few MB until it outgrows it): the listing is written in batches as it is found, and read
back sorted by name (SQLite's sorter spills to disk too), so what a run holds at once is a
batch, whatever the number of granules.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any, Self

from h5sidecar.dest import scratch_db
from h5sidecar.references import SourceInfo
from h5sidecar.workflows.listing._listed_granule import Granule

__all__ = ["FIELDS", "StagedListing", "granule_of", "put"]

#: Granules written or read back at once.
BATCH = 10_000

#: The identity columns of the staged table ``g`` (beside its ``name``), in this order.
FIELDS = _FIELDS = ("url", "size", "etag", "mtime", "mtime_ns", "inode", "ctime_ns", "device")
#: SQLite integers are signed 64-bit: a larger inode or device number (some network file
#: systems) is staged as text.
_INT_MAX = 2**63 - 1


class StagedListing:
    """Granules of a listing, staged on disk; iterating yields them sorted by name (granules
    of one name in the order they were added, as a stable sort would).

    Use as a context manager, or :meth:`close` it: the staging file is then removed.
    """

    def __init__(self, granules: Iterable[Granule] = ()) -> None:
        self._db = scratch_db()
        self._db.execute(f"CREATE TABLE g (name TEXT NOT NULL, {', '.join(_FIELDS)})")
        self._n = 0
        self.add(granules)

    def add(self, granules: Iterable[Granule]) -> None:
        """Stage ``granules`` (written a batch at a time)."""
        self.add_rows((g.name, *(put(getattr(g.identity, f)) for f in _FIELDS))
                      for g in granules)

    def add_rows(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Stage granules given as rows ``(name, *FIELDS)`` (integers above SQLite's range as
        text), a batch at a time: what a listing that finds millions writes without making a
        :class:`Granule` of each."""
        it = iter(rows)
        while batch := list(itertools.islice(it, BATCH)):
            self._db.execute("BEGIN")
            self._db.executemany(f"INSERT INTO g VALUES (?, {', '.join('?' * len(_FIELDS))})",
                                 batch)
            self._db.execute("COMMIT")
            self._n += len(batch)

    @property
    def db(self) -> sqlite3.Connection:
        """The staging database (table ``g``: ``name`` and :data:`FIELDS`, one row a
        granule), for queries that compare the listing with other tables in SQL."""
        return self._db

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Granule]:
        return self.granules()

    def granules(self) -> Iterator[Granule]:
        """The granules sorted by name, read a batch at a time."""
        for name, *fields in self._rows(f"name, {', '.join(_FIELDS)}"):
            yield granule_of(name, fields)

    def marked(self, table: str, column: str) -> Iterator[tuple[Any, str, tuple[Any, ...]]]:
        """``(mark, name, fields)`` of each granule sorted by name, where ``mark`` is
        ``column`` of the row of ``table`` (a table of this database keyed by ``gid``, the
        staged row's ``rowid``) for the granule, None when it has none; ``fields`` are its
        :data:`FIELDS` (:func:`granule_of` makes the granule)."""
        cols = ", ".join(f"g.{f}" for f in _FIELDS)
        for mark, name, *fields in self._rows(
                f"m.{column}, g.name, {cols}",
                f"g LEFT JOIN {table} m ON m.gid = g.rowid ORDER BY g.name, g.rowid"):
            yield mark, name, tuple(fields)

    def names(self) -> Iterator[tuple[str, str]]:
        """``(url, name)`` of each granule sorted by name (cheaper than :meth:`granules`)."""
        return self._rows("url, name")

    def _rows(self, columns: str, source: str = "g ORDER BY name, rowid"
              ) -> Iterator[tuple[Any, ...]]:
        cur = self._db.execute(f"SELECT {columns} FROM {source}")
        try:
            while rows := cur.fetchmany(BATCH):
                yield from rows
        finally:
            cur.close()

    def close(self) -> None:
        """Close the staging database (its file is removed)."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def granule_of(name: str, fields: Iterable[Any]) -> Granule:
    """The :class:`Granule` of a staged row (``name`` and its :data:`FIELDS`)."""
    url, size, etag, mtime, *ints = fields
    return Granule(url, name, SourceInfo(url, size, etag, mtime, *map(_get, ints)))


def put(value: Any) -> Any:
    """``value`` as staged: an integer above SQLite's range as text."""
    return str(value) if isinstance(value, int) and value > _INT_MAX else value


def _get(value: Any) -> Any:
    return int(value) if isinstance(value, str) else value
