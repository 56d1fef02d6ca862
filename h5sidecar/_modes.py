"""File modes that follow the process umask, for files written through a temporary name.

``tempfile.mkstemp`` creates files 0600 and ``mkdtemp`` directories 0700 whatever the umask,
so a sidecar written atomically through them would be private to its writer even where every
other tool's output is group- or world-readable.  After creating the temporary, its mode is set
to what ``open()`` / ``mkdir()`` would have given: 0666 / 0777 masked by the umask.
"""

from __future__ import annotations

import os
import threading

__all__ = ["current_umask", "follow_umask"]

_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux ``/proc``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    # elsewhere the only way is to set and restore it (serialised: the umask is per process)
    with _LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike[str], *, directory: bool = False, fd: int | None = None) -> None:
    """Give ``path`` (or the open ``fd``) the mode a plain ``open``/``mkdir`` would have."""
    mode = (0o777 if directory else 0o666) & ~current_umask()
    if fd is not None and os.chmod in os.supports_fd:
        os.chmod(fd, mode)
    else:
        os.chmod(path, mode)
