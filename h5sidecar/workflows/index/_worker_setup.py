"""What a worker process does as it starts: the caller's environment, umask and logging, a
memory limit, and a thread that ends it with the batch that started it.

Kept apart from the executors that start workers (:mod:`._executors`, :mod:`._isolated`): this
runs inside the worker.
"""

from __future__ import annotations

import logging
import os
import resource
import select
import threading
import time

from h5sidecar._pids import pid_alive

__all__ = ["env_snapshot", "init_worker", "limit_memory", "watch_parent"]

#: Environment variables handed to workers (credentials, endpoint, h5sidecar settings).
_ENV_PREFIXES = ("AWS_", "H5SIDECAR_", "EARTHDATA_", "NETRC")  # NETRC: the .netrc file to use


def env_snapshot() -> dict[str, str]:
    """The caller's current AWS_* / H5SIDECAR_* / EARTHDATA_* / NETRC variables.

    A forkserver child inherits the environment of the fork server, fixed when the server
    started; workers must see the caller's *current* credentials and endpoint instead.
    """
    return {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}


def init_worker(
    level: int, env: dict[str, str], parent: int, memory_limit: int = 0, umask: int | None = None
) -> None:
    """Set up a worker process of :func:`~._executors.process_pool` (its ``initializer``)."""
    limit_memory(memory_limit)
    if umask is not None:  # the caller's, not the fork server's (sidecars follow the umask)
        os.umask(umask)
    for key in [k for k in os.environ if k.startswith(_ENV_PREFIXES) and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s [%(process)d] %(message)s")
    watch_parent(parent)


def limit_memory(memory_limit: int) -> None:
    """Cap this process's data memory (``RLIMIT_DATA``) at ``memory_limit`` bytes (0: none)."""
    if memory_limit > 0 and hasattr(resource, "RLIMIT_DATA"):
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        soft = memory_limit if hard == resource.RLIM_INFINITY else min(memory_limit, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def watch_parent(pid: int) -> None:
    """Exit this process when process ``pid`` ends (a thread waits for it)."""
    threading.Thread(target=_exit_with, args=(pid,), name="h5sidecar-parent", daemon=True).start()


def _exit_with(pid: int) -> None:
    """Exit this worker when process ``pid`` (the batch) ends.

    A worker's parent is the fork server, not the batch, so the kernel's parent-death signal
    does not help; and a worker waiting for its next task would wait forever.  A pidfd becomes
    readable when the process exits (polling ``kill(pid, 0)`` where pidfds are missing).
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # not Linux >= 5.3
        while pid_alive(pid):
            time.sleep(1.0)
    else:
        select.select([fd], [], [])
    os._exit(1)  # no cleanup: the batch is gone, and a running HDF5 call must not delay this

