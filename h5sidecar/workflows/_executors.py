"""Run per-granule tasks serially, in worker processes, or on any ``concurrent.futures`` executor.

Worker processes are started with the ``forkserver`` (or ``spawn``) method: a forked child would
inherit the parent's fsspec/s3fs instances with their event-loop threads and open connections,
which deadlock or corrupt each other.  With forkserver each worker builds its own.

The HDF5 library can crash the process on a corrupt file; a crashed worker breaks a
``ProcessPoolExecutor`` and every task in flight with it.  When we own the pool we start a fresh
one and re-run the tasks that were in flight one by one, so only the culprit is reported
(``worker_crashed``) and the batch goes on.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import traceback
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Literal

from h5sidecar.workflows._report import ErrorRecord, GranuleResult, error_record

__all__ = ["ExecutorSpec", "SerialExecutor", "Task", "process_pool", "run_tasks"]

log = logging.getLogger("h5sidecar.workflows")

#: How tasks run: in this process, in worker processes we manage, or on a caller's executor.
ExecutorSpec = Literal["serial", "process"] | Executor

#: Tasks a worker runs before it is replaced (bounds memory growth of long batches).
_MAX_TASKS_PER_CHILD = 64

#: Environment variables handed to workers (credentials, endpoint, h5sidecar settings).
_ENV_PREFIXES = ("AWS_", "H5SIDECAR_")


@dataclass(frozen=True, slots=True)
class Task:
    """One call ``fn(*args)`` producing a :class:`GranuleResult` for ``url``."""

    url: str
    sidecar: str
    args: tuple[Any, ...]


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


def process_pool(workers: int, *, log_level: int | None = None) -> ProcessPoolExecutor:
    """A process pool whose workers never inherit fsspec state (forkserver, else spawn)."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        # import the heavy modules (h5py, zarr) once in the fork server, not in every worker
        ctx.set_forkserver_preload(["h5sidecar.workflows._index"])
    level = log.getEffectiveLevel() if log_level is None else log_level
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(level, _env_snapshot()),
        max_tasks_per_child=_MAX_TASKS_PER_CHILD,
    )


def _env_snapshot() -> dict[str, str]:
    """The caller's current AWS_* / H5SIDECAR_* variables.

    A forkserver child inherits the environment of the fork server, fixed when the server
    started; workers must see the caller's *current* credentials and endpoint instead.
    """
    return {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}


def _init_worker(level: int, env: dict[str, str]) -> None:
    for key in [k for k in os.environ if k.startswith(_ENV_PREFIXES) and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s [%(process)d] %(message)s")


def run_tasks(
    fn: Callable[..., GranuleResult],
    tasks: Iterable[Task],
    executor: ExecutorSpec,
    *,
    workers: int,
) -> Generator[GranuleResult, None, None]:
    """Yield one :class:`GranuleResult` per task, in completion order.

    A task that raises (a bug, a dead worker) yields a ``failed`` result instead of stopping the
    batch.
    """
    tasks = list(tasks)
    if executor == "serial":
        yield from _run_on(SerialExecutor(), fn, deque(tasks), window=1, suspects=None)
    elif executor == "process":
        yield from _run_processes(fn, tasks, workers)
    elif isinstance(executor, Executor):
        yield from _run_on(executor, fn, deque(tasks), window=2 * workers, suspects=None)
    else:
        raise ValueError(f"executor must be 'serial', 'process' or an Executor, got {executor!r}")


def _run_processes(
    fn: Callable[..., GranuleResult], tasks: list[Task], workers: int
) -> Iterator[GranuleResult]:
    queue = deque(tasks)
    suspects: list[Task] = []
    while queue:
        pool = process_pool(workers)
        clean = False
        try:
            # a small window keeps few tasks in flight, so few are suspects when a worker dies
            yield from _run_on(pool, fn, queue, window=workers + 1, suspects=suspects)
            clean = True
        finally:
            pool.shutdown(wait=clean, cancel_futures=True)
    for task in suspects:
        # alone in a fresh single-worker pool: a second crash identifies the culprit
        pool = process_pool(1)
        try:
            yield from _run_on(pool, fn, deque([task]), window=1, suspects=None)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _run_on(
    executor: Executor,
    fn: Callable[..., GranuleResult],
    queue: deque[Task],
    *,
    window: int,
    suspects: list[Task] | None,
) -> Iterator[GranuleResult]:
    """Run ``queue`` on ``executor`` with at most ``window`` tasks in flight.

    With ``suspects`` given, a broken pool moves the in-flight tasks there and returns (the
    caller starts a new pool for the rest of ``queue``); without, they are reported as crashed.
    """
    inflight: dict[Future[GranuleResult], Task] = {}
    while queue or inflight:
        while queue and len(inflight) < window:
            task = queue.popleft()
            inflight[executor.submit(fn, *task.args)] = task
        done, _ = wait(inflight, return_when=FIRST_COMPLETED)
        crashed: list[Task] = []
        for fut in done:
            task = inflight.pop(fut)
            exc = fut.exception()
            if exc is None:
                yield fut.result()
            elif isinstance(exc, KeyboardInterrupt):
                raise exc  # Ctrl-C reached the workers too: stop the batch, not this granule
            elif isinstance(exc, BrokenProcessPool) and suspects is not None:
                crashed.append(task)
            else:
                yield _failure(task, exc)
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


def _failure(task: Task, exc: BaseException) -> GranuleResult:
    """A failed result for a task whose call raised instead of returning a result."""
    if isinstance(exc, BrokenProcessPool):
        err = error_record(exc, kind="worker_crashed")
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
        err = error_record(exc, kind="bug")
        err = ErrorRecord(
            kind="bug", message=f"{type(exc).__name__}: {exc}", hint=err.hint, type=err.type
        )
    return GranuleResult(url=task.url, sidecar=task.sidecar, status="failed", error=err)


def default_workers(n_tasks: int) -> int:
    """Worker processes for ``n_tasks``: one per usable CPU, at most one per task."""
    try:
        cpus = len(os.sched_getaffinity(0))  # honours CPU pinning (containers, taskset)
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, n_tasks))
