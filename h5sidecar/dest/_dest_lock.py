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

__all__ = ["LOCK_NAME", "dest_lock", "file_lock"]

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
    if is_remote(dest):
        yield
        return
    os.makedirs(dest, exist_ok=True)
    other = "another run uses it" if exclusive else "a prune --apply is cleaning it"
    with file_lock(os.path.join(dest, LOCK_NAME), exclusive=exclusive,
                   waiting=f"{holder} waits for {dest}: {other}"):
        yield


@contextlib.contextmanager
def file_lock(path: str, *, exclusive: bool, waiting: str) -> Iterator[None]:
    """Hold a ``flock`` on the local file ``path`` (created when missing, never removed).

    Waits, after logging ``waiting`` once, while another process holds it in a conflicting
    mode.  No-op where ``fcntl`` is missing.

    Parameters
    ----------
    path : str
        The lock file; its folder must exist.
    exclusive : bool
        Exclusive or shared.
    waiting : str
        The warning logged when the lock is held elsewhere (who waits, and for what).
    """
    if fcntl is None:
        yield
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except PermissionError:  # another user's lock file: flock needs no write access
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("%s (%s)", waiting, path)
            fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)  # releases the lock
