"""One writer of a local cube at a time, and what an interrupted one left beside it removed.

A build or append to a local ``OUT`` holds an exclusive ``flock`` on ``.NAME.lock`` beside it
(:func:`~h5sidecar.dest.file_lock`, the primitive of DEST's lock): two appends to one cube
otherwise both read the old cube and the second swap drops the first one's members.  Holding
it, the run removes the staging leftovers of a writer killed mid-write (``kill -9``, an OOM):
``.NAME.<random>.tmp`` (a Parquet cube's swapped-in directory, a JSON cube's file),
``.NAME.pieces.<random>.tmp`` (a build's staged pieces) and ``.NAME.<random>.old`` (the old
directory moved aside where directories cannot be exchanged), for ``NAME`` the cube's name or
one of its split parts' (``cube-0.parq``, ...).  The lock makes this safe: a writer of this
cube that is alive holds it, so every such leftover is a dead one's.  A part's leftovers are
left alone while that part's own lock is held (someone writing ``cube-1.parq`` as a cube of
its own), and an ``.old`` directory while the cube itself is missing (it then is the only copy).
Where there is no ``flock`` (Windows) nothing is removed.

The lock file's name is hidden (DEST's walk, the gateway and prune skip ``.`` names) and stays
after the run, as DEST's does (removing it would race the next writer's ``open``).  An object
store ``OUT`` has neither: its writes stage nothing beside the cube.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
from collections.abc import Iterator

from h5sidecar.dest import file_lock, is_remote

try:  # POSIX only: elsewhere nothing tells a live writer's leftovers from a dead one's
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["writing_cube"]

log = logging.getLogger("h5sidecar.workflows")


@contextlib.contextmanager
def writing_cube(out: str) -> Iterator[None]:
    """Hold the lock of the local cube ``out`` and remove its dead writers' leftovers (see the
    module docstring); a no-op for an object-store ``out`` or one whose folder is missing (no
    leftovers can be there; the write makes the folder)."""
    if is_remote(out):
        yield
        return
    folder, name = os.path.split(os.path.abspath(out.rstrip("/")))
    if not os.path.isdir(folder):
        yield
        return
    with file_lock(os.path.join(folder, f".{name}.lock"), exclusive=True,
                   waiting=f"cube waits for {out}: another build or append writes it"):
        _sweep(folder, name)
        yield


def _sweep(folder: str, name: str) -> None:
    if fcntl is None:  # no lock held: a live writer's staging would look like a dead one's
        return
    stem, ext = os.path.splitext(name)
    if ext not in (".parq", ".json"):  # the names cube_paths gives the parts
        stem, ext = name, ""
    owner = f"{re.escape(name)}|{re.escape(stem)}-\\d+{re.escape(ext)}"
    leftover = re.compile(rf"\.({owner})\.((pieces\.)?[A-Za-z0-9_]+\.tmp|[A-Za-z0-9_]+\.old)")
    with os.scandir(folder) as entries:
        found = [(e, m) for e in entries if (m := leftover.fullmatch(e.name))]
    for entry, m in found:
        part = m.group(1)
        if part != name and _held(os.path.join(folder, f".{part}.lock")):
            continue
        if entry.name.endswith(".old") and not os.path.exists(os.path.join(folder, part)):
            log.warning("keeping %s: %s is missing and it may be its only copy", entry.path,
                        part)
            continue
        log.info("removing %s left by an interrupted cube write", entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def _held(lock: str) -> bool:
    """Whether another process holds the lock file ``lock`` (False when it does not exist)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
