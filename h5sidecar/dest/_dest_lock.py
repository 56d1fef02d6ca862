"""The lock of a local DEST: ``index`` and ``prune --apply`` never run into each other.

``prune --apply`` decides from the run report which format each granule is indexed in; an
``index`` switching ``--format`` writes the new sidecars first and the report last, so a prune
in between removed the fresh sidecars as "other format".  Each ``index`` run therefore holds a
*shared* ``flock`` on ``DEST/_h5sidecar.lock`` while it writes (index runs may share a DEST:
their reports merge), and ``prune --apply`` an *exclusive* one.  Whoever comes second waits,
with a warning saying for what, rather than failing: a prune started during a long index run
simply happens after it, which is what the user asked for.

Object stores have no such lock: there prune relies on its second guard alone, which holds
everywhere (it never removes a sidecar written after the report it read; see
:mod:`h5sidecar.workflows._prune`).  Like ``_report.json`` and the record database, its name
starts with ``_`` and has no sidecar suffix, so the gateway, catalogs and tools that take every
other file of DEST for a sidecar never see it; it stays after the run (removing it would race
the next run's ``open``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from h5sidecar.dest._locations import is_remote

try:  # POSIX only: elsewhere the mtime guard alone protects a DEST
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "dest_lock"]

log = logging.getLogger("h5sidecar.workflows")

LOCK_NAME = "_h5sidecar.lock"


@contextlib.contextmanager
def dest_lock(dest: str, *, exclusive: bool, holder: str) -> Iterator[None]:
    """Hold ``DEST``'s lock (shared for ``index``, exclusive for ``prune --apply``).

    Waits, after one warning, while another run holds it in a conflicting mode.  No-op for an
    object store DEST (or where ``fcntl`` is missing).

    Parameters
    ----------
    dest : str
        Local DEST folder (created when missing).
    exclusive : bool
        Exclusive (prune) or shared (index).
    holder : str
        What this run is, for the warning (``"prune --apply"``, ``"index"``).
    """
    if is_remote(dest) or fcntl is None:
        yield
        return
    os.makedirs(dest, exist_ok=True)
    fd = os.open(os.path.join(dest, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            other = "another run uses it" if exclusive else "a prune --apply is cleaning it"
            log.warning("%s waits for %s: %s (%s/%s)", holder, dest, other, dest, LOCK_NAME)
            fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the lock
