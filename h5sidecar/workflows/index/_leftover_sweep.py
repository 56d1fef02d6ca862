"""What an interrupted local write of a sidecar left beside it, found and removed.

The atomic writers stage into ``.<name>.<random>.tmp`` (and, where directories cannot be
exchanged atomically, move the old one to ``.<name>.<random>.old``) in the same folder; a
process killed mid-write leaves them behind.  A run removes those of the granules it indexes
(and only those: a concurrent run on other granules is unaffected) before it decides whether
they are up to date.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
from collections.abc import Iterable

from h5sidecar.dest import is_remote

__all__ = ["LeftoverSweep", "sweep_folders", "sweep_leftovers"]

log = logging.getLogger("h5sidecar.workflows")

_LEFTOVER = re.compile(r"\.(.+)\.[A-Za-z0-9_]+\.(tmp|old)")


class LeftoverSweep:
    """:func:`sweep_leftovers` for many local sidecars, called once per sidecar, reading each
    folder once (not once per sidecar: that is quadratic in the folder's size).

    Only the leftovers of the sidecars it is called with are removed (a concurrent run on
    other granules is unaffected); what is held is the folders and the leftovers found, not
    every name.
    """

    def __init__(self) -> None:
        self._folders: dict[str, dict[str, list[os.DirEntry[str]]]] = {}

    def __call__(self, sidecar: str) -> None:
        """Remove what an interrupted write of ``sidecar`` left beside it."""
        if is_remote(sidecar):
            return
        folder, name = os.path.split(sidecar)
        found = self._folders.get(folder)
        if found is None:
            found = self._folders[folder] = _leftovers_in(folder)  # the one read of it
        for entry in found.pop(name, ()):
            _remove(entry)

    @property
    def folders_read(self) -> int:
        """How many folders were read."""
        return len(self._folders)


def sweep_folders(sidecars: Iterable[str]) -> int:
    """:class:`LeftoverSweep` over ``sidecars``; returns how many folders were read."""
    sweep = LeftoverSweep()
    for sidecar in sidecars:
        sweep(sidecar)
    return sweep.folders_read


def _leftovers_in(folder: str) -> dict[str, list[os.DirEntry[str]]]:
    """The staging leftovers in ``folder`` by the sidecar name they belong to; the folder's
    other entries (a million sidecars in a flat DEST) are read and dropped one by one."""
    found: dict[str, list[os.DirEntry[str]]] = {}
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                m = _LEFTOVER.fullmatch(entry.name)
                if m:
                    found.setdefault(m.group(1), []).append(entry)
    except (FileNotFoundError, NotADirectoryError):
        pass
    return found


def _remove(entry: os.DirEntry[str]) -> None:
    log.info("removing %s left by an interrupted run", entry.path)
    if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):  # a concurrent run removed it first
            os.unlink(entry.path)


def sweep_leftovers(sidecar: str) -> None:
    """Remove what an interrupted local write of this sidecar left beside it.

    The atomic writers stage into ``.<name>.<random>.tmp`` (and, where directories cannot be
    exchanged atomically, move the old one to ``.<name>.<random>.old``) in the same folder; a
    process killed mid-write leaves them behind.  Only this granule's leftovers are touched,
    so concurrent runs on other granules are unaffected.
    """
    if is_remote(sidecar):
        return  # object-store writes stage nothing beside the sidecar
    folder, name = os.path.split(sidecar)
    if not os.path.isdir(folder):
        return
    pattern = re.compile(r"\." + re.escape(name) + r"\.[A-Za-z0-9_]+\.(tmp|old)")
    for entry in os.scandir(folder):
        if pattern.fullmatch(entry.name):
            _remove(entry)
