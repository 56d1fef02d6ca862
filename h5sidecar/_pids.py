"""Whether a process still runs, by its id: what the sweeps of leftovers of killed processes
(temporary record mirrors, orphaned indexing workers) ask before they act."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """True when a process with id ``pid`` runs (another user's included), False when none does."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True
