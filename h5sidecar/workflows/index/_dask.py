"""Run the batch workflow on a Dask cluster: ``h5sidecar index SOURCE -o DEST --dask ADDRESS``.

:class:`DaskExecutor` is a ``concurrent.futures.Executor`` over a ``distributed.Client``, so
:func:`~h5sidecar.workflows.index_many` drives it like any executor: one Dask task per granule,
results handed back (and counted by the progress bar) as each task finishes.  On top of Dask it
adds what a batch of granules needs:

* **transient failures are retried** on the worker: a granule whose indexing failed with a
  ``source_read`` or ``stale_reference`` error (network faults that outlasted the fetch layer's
  own retries, an object replaced mid-read) is tried again after an exponential back-off;
* **bad granules are isolated**: expected failures come back as ``failed`` results (never as
  exceptions that would stop the batch), and a granule that kills its worker process (the HDF5
  library can crash on corrupt files) is rescheduled by Dask on another worker, then -- after
  ``distributed.scheduler.allowed-failures`` deaths -- reported as ``worker_crashed``;
* **each granule is bounded in time**: with a time limit (what :func:`run_tasks` asks through
  :meth:`DaskExecutor.limited`), each attempt runs in a child process of the worker
  (:func:`~h5sidecar.workflows.index._isolated.run_isolated`), killed past the limit (``timeout``) --
  HDF5 looping in C over a corrupt file would otherwise hold a worker thread for good -- and a
  child that crashes costs its granule only (``worker_crashed``), not the worker.

Nothing here depends on where the workers run: with ``local:N`` a ``LocalCluster`` of N
single-threaded worker processes is started on 127.0.0.1; any other address is an existing
scheduler (``tcp://scheduler:8786``).  Workers need h5sidecar installed and, for S3, credentials
and endpoint in their environment (``AWS_*`` variables); the storage options of the run travel
with each task.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import is_dataclass, replace
from typing import Any

from h5sidecar.dest import ErrorRecord, GranuleResult, error_record
from h5sidecar.errors import ErrorKind, require_extra

__all__ = [
    "TRANSIENT_KINDS",
    "DaskExecutor",
    "dask_client",
    "dask_executor",
    "run_with_retries",
]

log = logging.getLogger("h5sidecar.workflows")

#: Error kinds worth another attempt (the same granule may well succeed a moment later).
TRANSIENT_KINDS = frozenset({ErrorKind.SOURCE_READ, ErrorKind.STALE_REFERENCE})


def run_with_retries(
    fn: Callable[..., GranuleResult],
    args: tuple[Any, ...],
    retries: int,
    backoff: float,
) -> GranuleResult:
    """``fn(*args)``, repeated up to ``retries`` times while it fails with a transient kind.

    Waits ``backoff * 2**attempt`` seconds (with +-25 % jitter) between attempts.  The result
    of the last attempt is returned; its ``seconds["attempts"]`` says how many were made.
    """
    attempt = 0
    while True:
        result = fn(*args)
        transient = result.error is not None and result.error.kind in TRANSIENT_KINDS
        if not transient or attempt >= retries:
            seconds = dict(result.seconds)
            seconds["attempts"] = float(attempt + 1)
            return replace(result, seconds=seconds)
        delay = backoff * 2**attempt * random.uniform(0.75, 1.25)
        log.info("transient failure on %s (%s); retry %d/%d in %.1f s", result.url,
                 result.error.kind if result.error else "", attempt + 1, retries, delay)
        time.sleep(delay)
        attempt += 1


def run_bounded(
    fn: Callable[..., GranuleResult],
    args: tuple[Any, ...],
    retries: int,
    backoff: float,
    time_limit: float | None,
    memory_limit: int,
) -> GranuleResult:
    """:func:`run_with_retries`, each attempt in a child process bounded by ``time_limit``
    seconds and ``memory_limit`` bytes (see :func:`~h5sidecar.workflows.index._isolated.run_isolated`)."""
    from h5sidecar.workflows.index._isolated import run_isolated

    bounded = functools.partial(_isolated_call, run_isolated, fn, time_limit, memory_limit)
    return run_with_retries(bounded, args, retries, backoff)


def _isolated_call(run: Callable[..., GranuleResult], fn: Callable[..., GranuleResult],
                   time_limit: float | None, memory_limit: int, *args: Any) -> GranuleResult:
    return run(fn, args, time_limit=time_limit, memory_limit=memory_limit)


def _crashed(url: str, sidecar: str, exc: BaseException) -> GranuleResult:
    base = error_record(exc, kind=ErrorKind.WORKER_CRASHED)
    err = ErrorRecord(kind=ErrorKind.WORKER_CRASHED, type=type(exc).__name__, hint=base.hint,
                      message=f"every worker that tried {url} died ({exc})")
    return GranuleResult(url=url, sidecar=sidecar, status="failed", error=err)


def _without_secrets(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with the storage options of task options scrubbed of credentials: a task graph
    crosses the network and sits in the scheduler, so workers resolve their own credentials
    (``AWS_*``, ``AWS_PROFILE``, roles; an ``EndpointCredentials`` travels without its token)."""
    from h5sidecar.credentials import scrub_credentials

    out = []
    for a in args:
        options = getattr(a, "storage_options", None)
        if is_dataclass(a) and not isinstance(a, type) and options:
            a = replace(a, storage_options=scrub_credentials(options))
        out.append(a)
    return tuple(out)


class DaskExecutor(Executor):
    """A ``concurrent.futures`` executor running granule tasks on a Dask cluster.

    Parameters
    ----------
    client : distributed.Client
        The cluster to use (not closed by :meth:`shutdown`).
    retries : int
        Extra attempts for a granule that failed with a transient error.
    backoff : float
        Seconds before the first retry (doubled for each further one).
    time_limit : float, optional
        Seconds after which a granule's attempt is ended (each attempt then runs in a child
        process of its worker); ``None``: attempts run in the worker's thread, unbounded inside
        HDF5.  :func:`~h5sidecar.workflows.index_many` sets it through :meth:`limited`.
    memory_limit : int
        Data-memory limit of those child processes (bytes, 0: none).

    Notes
    -----
    ``submit(fn, url, sidecar, ...)`` expects the batch workflow's task signature
    (:func:`~h5sidecar.workflows.index_one`): its first two arguments name the granule and its
    sidecar, so that a task whose workers all died resolves to a ``worker_crashed`` result.
    """

    def __init__(self, client: Any, *, retries: int = 2, backoff: float = 1.0,
                 time_limit: float | None = None, memory_limit: int = 0) -> None:
        self.client = client
        self.retries = retries
        self.backoff = backoff
        self.time_limit = time_limit
        self.memory_limit = memory_limit
        self._futures: set[Any] = set()

    def limited(self, time_limit: float | None, memory_limit: int) -> DaskExecutor:
        """This executor on the same client, its tasks bounded by ``time_limit`` seconds and
        ``memory_limit`` bytes each (see :class:`~h5sidecar.workflows.index._executors.LimitedExecutor`)."""
        bounded = DaskExecutor(self.client, retries=self.retries, backoff=self.backoff,
                               time_limit=time_limit, memory_limit=memory_limit)
        bounded._futures = self._futures  # one set: shutdown() cancels the tasks of both
        return bounded

    @property
    def n_threads(self) -> int:
        """Worker threads in the cluster now (at least 1): how many tasks run at once."""
        return max(1, sum(self.client.nthreads().values()))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Schedule ``fn(*args)`` (with transient-failure retries) as one Dask task."""
        if kwargs:
            raise TypeError("DaskExecutor.submit takes positional task arguments only")
        from distributed import KilledWorker

        out: Future[Any] = Future()
        out.set_running_or_notify_cancel()
        # pure=False: re-running a granule is a new task, never a cached old result
        if self.time_limit or self.memory_limit:
            dfut = self.client.submit(run_bounded, fn, _without_secrets(args), self.retries,
                                      self.backoff, self.time_limit, self.memory_limit,
                                      pure=False)  # fmt: skip
        else:
            dfut = self.client.submit(run_with_retries, fn, _without_secrets(args), self.retries,
                                      self.backoff, pure=False)  # fmt: skip
        self._futures.add(dfut)

        def done(f: Any) -> None:
            self._futures.discard(f)
            try:
                out.set_result(f.result())
            except KilledWorker as exc:
                out.set_result(_crashed(str(args[0]), str(args[1]), exc))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's future
                out.set_exception(exc)

        dfut.add_done_callback(done)
        return out

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Cancel the tasks still pending when ``cancel_futures`` (e.g. on Ctrl-C)."""
        if cancel_futures and self._futures:
            self.client.cancel(list(self._futures))
            self._futures.clear()


@contextlib.contextmanager
def dask_client(address: str, *, log_level: int | None = None) -> Iterator[Any]:
    """A ``distributed.Client`` for ``address``: ``local:N`` starts a LocalCluster.

    ``local:N`` (or ``local`` for one worker per CPU) starts N single-threaded worker
    *processes* on 127.0.0.1 (dashboard on a free loopback port, glibc's mmap threshold raised
    to :data:`WORKER_MMAP_THRESHOLD` unless configured, each worker's decode pool sized to its
    share of the CPUs unless ``H5SIDECAR_DECODE_THREADS`` is set); it is closed on exit.  Any
    other value is the address of a running scheduler (``tcp://host:8786``); only the client
    is closed on exit.

    Raises
    ------
    ValueError
        For ``local:`` with a count that is not a positive integer.
    """
    require_extra("dask", "dask", "distributed", feature="a Dask cluster (index --dask)")
    import dask
    from dask.system import CPU_COUNT
    from distributed import Client, LocalCluster

    if address == "local" or address.startswith("local:"):
        count = address.partition(":")[2]
        if count and (not count.isdigit() or int(count) < 1):
            raise ValueError(f"--dask {address!r}: use local:N with N >= 1 worker processes")
        n_workers = int(count) if count else CPU_COUNT
        with (
            dask.config.set(_worker_environ()),
            # the scheduler's HTTP server always starts: a free loopback port, never 8787
            # (two clusters at once would collide there)
            LocalCluster(n_workers=n_workers, threads_per_worker=1, env=_decode_env(n_workers),
                         processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                         silence_logs=log_level if log_level is not None else logging.WARNING)
            as cluster,
            Client(cluster) as client,
        ):
            yield client
        return
    with Client(address) as client:
        yield client


#: glibc's mmap threshold in the workers of a cluster :func:`dask_client` starts (bytes)
WORKER_MMAP_THRESHOLD = 4 * 2**20


def _worker_environ() -> dict[str, Any]:
    """Allocator settings for the worker processes of a LocalCluster we start.

    Dask starts workers with ``MALLOC_TRIM_THRESHOLD_`` set (freed memory goes back to the
    system at once), and setting any ``MALLOC_*`` variable also fixes glibc's mmap threshold at
    128 KiB: every larger buffer (each response body the S3 client receives, each decoded
    block) is then mapped, page-faulted and unmapped anew.  On a 500 MB granule's analysis that
    was ~25% of a worker's CPU.  A 4 MiB threshold keeps these buffers in the heap, which the
    trim threshold still returns to the system.  A value the user configured is kept.
    """
    import dask

    key = "distributed.nanny.pre-spawn-environ"
    if "MALLOC_MMAP_THRESHOLD_" in (dask.config.get(key, None) or {}):
        return {}
    return {f"{key}.MALLOC_MMAP_THRESHOLD_": WORKER_MMAP_THRESHOLD}


def _decode_env(n_workers: int) -> dict[str, str]:
    """Each worker's share of the CPUs for its decode pool (``H5SIDECAR_DECODE_THREADS``).

    A reader decodes chunks in a pool of one thread per CPU by default; N workers on one
    machine would each start such a pool, and oversubscribed decode threads made two workers
    on two cores slower than one thread each (1.53 against 1.33 s for two 500 MB granules).
    One worker still gets every core.  A value in the environment is kept (workers inherit it).
    """
    from dask.system import CPU_COUNT

    if os.environ.get("H5SIDECAR_DECODE_THREADS"):
        return {}
    return {"H5SIDECAR_DECODE_THREADS": str(max(1, CPU_COUNT // max(1, n_workers)))}


@contextlib.contextmanager
def dask_executor(address: str, *, retries: int = 2, backoff: float = 1.0) -> Iterator[DaskExecutor]:
    """A :class:`DaskExecutor` on the cluster at ``address`` (see :func:`dask_client`).

    Examples
    --------
    >>> with dask_executor("local:2") as ex:  # doctest: +SKIP
    ...     report = index_many("s3://bucket/atl03/", "s3://bucket/refs/", executor=ex,
    ...                         workers=ex.n_threads)
    """
    with dask_client(address) as client:
        yield DaskExecutor(client, retries=retries, backoff=backoff)
