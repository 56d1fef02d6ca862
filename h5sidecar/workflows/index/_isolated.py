"""Run one granule task in a child Python process, ended past a wall-clock limit.

A Dask worker runs tasks in threads, and HDF5 looping in C over a corrupt file holds its thread
(and the GIL) for good: nothing in that process can stop it, and the worker would be lost for
the rest of the batch.  So, with a time limit, each task runs in a child process the worker
thread waits for: past the limit the child is killed and the task resolves to a ``timeout``
result; a child killed by HDF5 (a segfault) resolves to ``worker_crashed``; the worker goes on.

The child is a fresh interpreter (``python -m h5sidecar.workflows.index._isolated``), not a
``multiprocessing`` process: Dask worker processes are daemonic by default, and
``multiprocessing`` refuses to start children of a daemonic process.  The task and its result
travel pickled over the child's stdin and stdout (the child points its own stdout at stderr, so
that a library printing there cannot garble the result).  Starting the interpreter and importing h5py costs about 0.6 s per
granule on a 2-core machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pickle
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from h5sidecar.dest import GranuleResult
from h5sidecar.workflows.index._executors import ProcessDied, Task, task_failure, timed_out
from h5sidecar.workflows.index._worker_setup import limit_memory, watch_parent

__all__ = ["run_isolated"]

log = logging.getLogger("h5sidecar.workflows")


def run_isolated(
    fn: Callable[..., GranuleResult],
    args: tuple[Any, ...],
    *,
    time_limit: float | None,
    memory_limit: int = 0,
) -> GranuleResult:
    """``fn(*args)`` in a child process; a ``timeout`` result if it outlives ``time_limit``.

    Parameters
    ----------
    fn : callable
        A picklable task whose first two arguments are the granule's URL and its sidecar
        (:func:`~h5sidecar.workflows.index_one`).
    args : tuple
        Its arguments (picklable).
    time_limit : float or None
        Seconds after which the child is killed (``None``: wait for it).
    memory_limit : int
        Data-memory limit of the child in bytes (``RLIMIT_DATA``, 0: none).

    Returns
    -------
    GranuleResult
        The task's result; ``failed`` with kind ``timeout`` when the child was killed past the
        limit, ``worker_crashed`` when it died, ``bug`` when the task raised.
    """
    task = Task(str(args[0]), str(args[1]), args)
    payload = pickle.dumps((sys.path, pickle.dumps((fn, args)), memory_limit, os.getpid(),
                            log.getEffectiveLevel()))  # fmt: skip
    proc = subprocess.Popen(  # our own interpreter and module
        [sys.executable, "-m", "h5sidecar.workflows.index._isolated"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    try:
        _hand_over(proc, payload)
        data, _ = proc.communicate(timeout=time_limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        log.warning("%s outlived the time limit: its child process was ended", task.url)
        return timed_out(task, time_limit or 0.0)
    except KeyboardInterrupt:
        # Ctrl-C reached the child too (one process group): it removes what its write had
        # begun, then exits; it is killed only when it has not within the grace period
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=_INTERRUPT_GRACE_SECONDS)
        proc.kill()  # an interrupted task leaves no child behind
        proc.communicate()
        raise
    except BaseException:
        proc.kill()  # a cancelled task leaves no child behind
        proc.communicate()
        raise
    if proc.returncode != 0 or not data:
        return task_failure(task, ProcessDied(_how_it_ended(proc.returncode)))
    result = pickle.loads(data)  # written by our own child
    if isinstance(result, BaseException):
        return task_failure(task, result)
    assert isinstance(result, GranuleResult)
    return result


def _hand_over(proc: subprocess.Popen[bytes], payload: bytes) -> None:
    """Write the task to the child and wait until it has imported what the task needs.

    The clock of the time limit starts then: starting an interpreter and importing h5py (0.6 s,
    several seconds on a loaded machine) is no part of the granule's time.  A child that never
    gets there is waited for :data:`_STARTUP_SECONDS` at most.
    """
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except BrokenPipeError:  # the child died at once: its exit status tells
        pass
    proc.stdin = None  # written: communicate() only reads from here on
    if select.select([proc.stdout], [], [], _STARTUP_SECONDS)[0]:
        os.read(proc.stdout.fileno(), len(_READY))  # b"" if the child died


#: Seconds a child may take to start and import the task's modules.
_STARTUP_SECONDS = 120.0
#: How long an interrupted child is given to remove what its write had begun (its own
#: ``finally`` blocks) before it is killed.
_INTERRUPT_GRACE_SECONDS = 5.0

#: What the child writes once ready to run the task (the result follows).
_READY = b"R"


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


def _child_main() -> None:
    """The child: read the task from stdin, run it, write its result (or error) pickled."""
    # the result goes to the original stdout; anything else printing there goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    path, task, memory_limit, parent, level = pickle.loads(sys.stdin.buffer.read())
    sys.path[:] = path  # the task's module may live where only the parent looks (tests, apps)
    _die_with_parent()
    watch_parent(parent)
    limit_memory(memory_limit)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s [%(process)d] %(message)s")
    result: object = None
    try:
        fn, args = pickle.loads(task)  # imports fn's modules (h5py...)
    except Exception as exc:  # noqa: BLE001 - handed back, reported as a bug of this granule
        result = exc
    out.write(_READY)
    out.flush()
    if result is None:
        try:
            result = fn(*args)
        except Exception as exc:  # noqa: BLE001 - handed back, reported as a bug of this granule
            result = exc
    with out:
        try:
            out.write(pickle.dumps(result))
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            out.write(pickle.dumps(RuntimeError(f"unpicklable result: {exc}")))


def _die_with_parent() -> None:
    """Have the kernel kill this process when its parent (the worker) dies (Linux).

    The thread of :func:`watch_parent` cannot run while HDF5 loops in C holding the GIL; the
    kernel's parent-death signal needs nothing from this process.  It fires when the thread
    that started this process ends, which waits for it in :func:`run_isolated`.
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


#: ``prctl`` option: the signal sent to this process when its parent dies (``linux/prctl.h``)
_PR_SET_PDEATHSIG = 1


if __name__ == "__main__":
    _child_main()
