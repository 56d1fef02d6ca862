"""Run per-granule tasks serially, in worker processes, or on any ``concurrent.futures`` executor.

Worker processes are started with the ``forkserver`` (or ``spawn``) method: a forked child would
inherit the parent's fsspec/s3fs instances with their event-loop threads and open connections,
which deadlock or corrupt each other.  With forkserver each worker builds its own.

The HDF5 library can crash the process on a corrupt file; a crashed worker breaks a
``ProcessPoolExecutor`` and every task in flight with it.  When we own the pool we start a fresh
one and re-run the tasks that were in flight one by one, so only the culprit is reported
(``worker_crashed``) and the batch goes on.

A worker is never left running on its own: one that outlives the per-granule time limit (stuck in
HDF5's C code or a blocking read) is ended with its pool, its granule reported as ``timeout`` and
the other granules in flight re-run; an interrupted batch (Ctrl-C, SIGTERM, an error) ends its
workers at once instead of waiting for their granules; and each worker watches the process that
started it and exits when it dies (even by ``kill -9``), so no worker, fork server or resource
tracker outlives the batch.

Only ending a process bounds a granule: HDF5 looping over a corrupt file's metadata (a B-tree
whose nodes are shared, walked again and again from the cache) runs in C without reading and
without releasing the GIL, so neither the indexer's checks at each read, nor a signal handler,
nor a watchdog thread ever runs.  So ``"serial"`` with a time limit runs its granules one by one
in a single worker process of ours, and an executor that can bound its tasks itself (a
:class:`LimitedExecutor` such as the Dask one) is asked to.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import time
import traceback
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from h5sidecar._compat.stdlib import kill_pool_workers
from h5sidecar._modes import current_umask
from h5sidecar.dest import ErrorRecord, GranuleResult, error_record
from h5sidecar.errors import ErrorKind
from h5sidecar.workflows.index._worker_setup import env_snapshot, init_worker

__all__ = ["ExecutorSpec", "LimitedExecutor", "SerialExecutor", "Task", "process_pool", "run_tasks"]

log = logging.getLogger("h5sidecar.workflows")

#: How tasks run: in this process, in worker processes we manage, or on a caller's executor.
ExecutorSpec = Literal["serial", "process"] | Executor

#: Seconds an interrupted run waits for its tasks running on a caller's executor (threads, which
#: nothing stops from outside) before it removes what their cut-short writes left.
_CALLERS_GRACE_S = 10.0

#: Tasks a worker runs before it is replaced (bounds memory growth of long batches).
_MAX_TASKS_PER_CHILD = 64

@dataclass(frozen=True, slots=True)
class Task:
    """One call ``fn(*args)`` producing a :class:`GranuleResult` for ``url``."""

    url: str
    sidecar: str
    args: tuple[Any, ...]


@runtime_checkable
class LimitedExecutor(Protocol):
    """An executor that can bound each task it runs (its own processes, its own clock)."""

    def limited(self, time_limit: float | None, memory_limit: int) -> Executor:
        """An executor like this one whose tasks are ended after ``time_limit`` seconds (then
        resolving to a ``timeout`` result) and run under ``memory_limit`` bytes (0: none)."""
        ...


class SerialExecutor(Executor):
    """A ``concurrent.futures`` executor running each task at submission, in this process."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Run ``fn(*args, **kwargs)`` now; return a finished future."""
        fut: Future[Any] = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the future carries it, as in any executor
            fut.set_exception(exc)
        return fut


def process_pool(
    workers: int, *, log_level: int | None = None, memory_limit: int = 0
) -> ProcessPoolExecutor:
    """A process pool whose workers never inherit fsspec state (forkserver, else spawn).

    ``memory_limit`` (bytes, 0: none) caps each worker's data memory (``RLIMIT_DATA``): a
    corrupt file can make HDF5 allocate gigabytes for one structure.
    """
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        # import the heavy modules (h5py, zarr) once in the fork server, not in every worker
        ctx.set_forkserver_preload(["h5sidecar.workflows.index._index"])
    level = log.getEffectiveLevel() if log_level is None else log_level
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=init_worker,
        initargs=(level, env_snapshot(), os.getpid(), memory_limit, current_umask()),
        max_tasks_per_child=_MAX_TASKS_PER_CHILD,
    )


def kill_workers(pool: ProcessPoolExecutor) -> None:
    """End the pool's worker processes now (their granules are abandoned).

    ``ProcessPoolExecutor`` can only wait for workers to finish their current task (Python <
    3.14 has no ``kill_workers``): see :func:`h5sidecar._compat.stdlib.kill_pool_workers`.
    """
    kill_pool_workers(pool)


def run_tasks(
    fn: Callable[..., GranuleResult],
    tasks: Iterable[Task],
    executor: ExecutorSpec,
    *,
    workers: int,
    time_limit: float | None = None,
    memory_limit: int = 0,
) -> Generator[GranuleResult, None, None]:
    """Yield one :class:`GranuleResult` per task, in completion order.

    ``tasks`` is consumed as the executor has room for another task (a window of a few per
    worker), never listed whole: a million tasks are not held at once.  When no task comes,
    no worker process is started.

    A task that raises (a bug, a dead worker) yields a ``failed`` result instead of stopping the
    batch.  With ``time_limit`` (seconds), a task still running after it is ended with its
    process and reported as ``timeout``: in the ``"process"`` pool; with ``"serial"``, whose
    tasks then run one by one in a single worker process (in this process only without a time
    limit: for debugging, unbounded inside HDF5); and on a :class:`LimitedExecutor` (Dask),
    which runs each task in a child process of its worker.  Another caller's executor runs
    threads that cannot be stopped from outside: there only the indexer's own checks apply.
    ``memory_limit`` caps the memory of each of these processes (see :func:`process_pool`).
    """
    queue = TaskQueue(tasks)
    if executor == "serial" and time_limit:
        yield from _run_processes(fn, queue, 1, time_limit, memory_limit)
    elif executor == "serial":
        yield from _run_on(SerialExecutor(), fn, queue, window=1, suspects=None)
    elif executor == "process":
        yield from _run_processes(fn, queue, workers, time_limit, memory_limit)
    elif isinstance(executor, Executor):
        if isinstance(executor, LimitedExecutor) and (time_limit or memory_limit):
            executor = executor.limited(time_limit, memory_limit)
        yield from _run_on(executor, fn, queue, window=2 * workers, suspects=None,
                           drain=_CALLERS_GRACE_S)
    else:
        raise ValueError(f"executor must be 'serial', 'process' or an Executor, got {executor!r}")


class TaskQueue:
    """The tasks still to run: those put back at the front (re-runs after a dead or stuck
    worker), then the rest of an iterator, taken one at a time (truthiness looks one ahead)."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self._front: deque[Task] = deque()
        self._rest = iter(tasks)

    def __bool__(self) -> bool:
        if not self._front:
            nxt = next(self._rest, None)
            if nxt is None:
                return False
            self._front.append(nxt)
        return True

    def popleft(self) -> Task:
        """The next task (``IndexError`` when none is left)."""
        if not self:
            raise IndexError("no task left")
        return self._front.popleft()

    def extendleft(self, tasks: Iterable[Task]) -> None:
        """Put ``tasks`` back at the front, as :meth:`collections.deque.extendleft`."""
        self._front.extendleft(tasks)


def _run_processes(
    fn: Callable[..., GranuleResult],
    queue: TaskQueue,
    workers: int,
    time_limit: float | None,
    memory_limit: int = 0,
) -> Iterator[GranuleResult]:
    suspects: list[Task] = []
    # a small window keeps few tasks in flight, so few are suspects when a worker dies; with a
    # time limit, no more tasks than workers, so a task's clock starts when a worker takes it
    window = workers if time_limit else workers + 1
    while queue:
        with _owned_pool(workers, memory_limit) as pool:
            yield from _run_on(
                pool, fn, queue, window=window, suspects=suspects, time_limit=time_limit
            )
    for task in suspects:
        # alone in a fresh single-worker pool: a second crash identifies the culprit
        with _owned_pool(1, memory_limit) as pool:
            yield from _run_on(
                pool, fn, TaskQueue([task]), window=1, suspects=None, time_limit=time_limit
            )


@contextlib.contextmanager
def _owned_pool(workers: int, memory_limit: int) -> Iterator[ProcessPoolExecutor]:
    """A process pool shut down on exit; its workers are ended at once unless the block
    finished normally (an interrupt, an error, a closed generator, a timed-out task)."""
    pool = process_pool(workers, memory_limit=memory_limit)
    clean = False
    try:
        yield pool
        clean = True
    except _PoolAbandoned:
        log.warning("a granule outlived the time limit: its worker was ended; going on")
    finally:
        if not clean:
            kill_workers(pool)
        pool.shutdown(wait=clean, cancel_futures=True)


def _run_on(
    executor: Executor,
    fn: Callable[..., GranuleResult],
    queue: TaskQueue,
    *,
    window: int,
    suspects: list[Task] | None,
    time_limit: float | None = None,
    drain: float | None = None,
) -> Iterator[GranuleResult]:
    """Run ``queue`` on ``executor`` with at most ``window`` tasks in flight.

    With ``drain`` (seconds), a run that stops early (Ctrl-C, an error, the generator closed)
    cancels its tasks not yet started and waits up to ``drain`` for those running: on a caller's
    executor nothing else ends them, and the caller then removes what their cut-short writes
    left, which a task started or still running after that would leave behind.

    With ``suspects`` given, a broken pool moves the in-flight tasks there and returns (the
    caller starts a new pool for the rest of ``queue``); without, they are reported as crashed.
    With ``time_limit``, a task in flight for longer is reported as ``timeout``, the others go
    back to the front of ``queue``, and this raises :class:`_PoolAbandoned` so the caller ends
    the pool (with the stuck worker) and starts a new one.
    """
    inflight: dict[Future[GranuleResult], Task] = {}
    started: dict[Future[GranuleResult], float] = {}
    try:
        while queue or inflight:
            while queue and len(inflight) < window:
                task = queue.popleft()
                fut = executor.submit(fn, *task.args)
                inflight[fut], started[fut] = task, time.monotonic()
            timeout = None
            if time_limit:
                timeout = max(0.0, min(started.values()) + time_limit - time.monotonic()) + 0.1
            done, _ = wait(inflight, timeout=timeout, return_when=FIRST_COMPLETED)
            crashed: list[Task] = []
            for fut in done:
                task = inflight.pop(fut)
                started.pop(fut)
                exc = fut.exception()
                if exc is None:
                    yield fut.result()
                elif isinstance(exc, KeyboardInterrupt):
                    raise exc  # Ctrl-C reached the workers too: stop the batch, not this granule
                elif isinstance(exc, BrokenProcessPool) and suspects is not None:
                    crashed.append(task)
                else:
                    yield task_failure(task, exc)
            if crashed:
                assert suspects is not None
                # every task still in flight died with the pool, whether or not it has noticed yet
                crashed.extend(inflight.values())
                suspects.extend(crashed)
                log.warning(
                    "a worker process died; %d granule(s) in flight will be retried one by one",
                    len(crashed),
                )
                return
            now = time.monotonic()
            overdue = [f for f in inflight if time_limit and now - started[f] > time_limit]
            if overdue:
                for fut in overdue:
                    yield timed_out(inflight.pop(fut), time_limit or 0.0)
                queue.extendleft(reversed(list(inflight.values())))  # innocent: run them again
                raise _PoolAbandoned
    except BaseException:
        if drain is not None and inflight:
            for fut in inflight:
                fut.cancel()
            wait(inflight, timeout=drain)
        raise


class _PoolAbandoned(Exception):
    """Internal: the pool holds a stuck worker; end it and go on with a new one."""


def timed_out(task: Task, limit: float) -> GranuleResult:
    """A failed result for a task ended after ``limit`` seconds in a worker process."""
    message = (
        f"indexing {task.url} was still running after {limit:g} s (max_granule_seconds plus a "
        "grace period), stuck where no check runs (inside HDF5, most likely looping over a "
        "corrupt file's metadata, or in a blocking system call): its worker process was ended. "
        "For a sound granule that is only slow, raise --max-granule-seconds (or "
        "H5SIDECAR_MAX_GRANULE_SECONDS; 0: no limit)"
    )
    err = error_record(TimeoutError(message), kind=ErrorKind.TIMEOUT)
    return GranuleResult(url=task.url, sidecar=task.sidecar, status="failed", error=err)


class ProcessDied(Exception):
    """The process running a task ended without a result (killed by a signal: HDF5's segfault
    on a corrupt file, the kernel's OOM killer)."""


def task_failure(task: Task, exc: BaseException) -> GranuleResult:
    """A failed result for a task whose call raised instead of returning a result."""
    if isinstance(exc, BrokenProcessPool | ProcessDied):
        err = error_record(exc, kind=ErrorKind.WORKER_CRASHED)
        err = ErrorRecord(
            kind=err.kind,
            message=f"the worker process died while indexing {task.url} ({exc})",
            hint=err.hint,
            type=err.type,
        )
    else:
        # index_one turns every expected error into a failed result; anything reaching here is
        # a bug: keep the batch going, record the traceback for the bug report.
        log.error("unexpected error indexing %s:\n%s", task.url, "".join(
            traceback.format_exception(exc)))
        err = error_record(exc, kind=ErrorKind.BUG)
        err = ErrorRecord(
            kind=ErrorKind.BUG, message=f"{type(exc).__name__}: {exc}", hint=err.hint, type=err.type
        )
    return GranuleResult(url=task.url, sidecar=task.sidecar, status="failed", error=err)


def default_workers(n_tasks: int) -> int:
    """Worker processes for ``n_tasks``: one per usable CPU, at most one per task."""
    try:
        cpus = len(os.sched_getaffinity(0))  # honours CPU pinning (containers, taskset)
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, n_tasks))
