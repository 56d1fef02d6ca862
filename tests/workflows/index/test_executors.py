"""Executors: serial, managed process pools (with crash isolation), a caller's executor."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from h5sidecar.workflows import GranuleResult, process_pool
from h5sidecar.workflows.index._executors import Task, run_tasks


def fake_index(url: str, sidecar: str, options: object, listed: object) -> GranuleResult:
    """A picklable task: crashes its process, raises, or reports the pid that ran it."""
    if url.endswith("crash"):
        os._exit(3)  # what a segfault in the HDF5 library looks like to the pool
    if url.endswith("bug"):
        raise RuntimeError("boom")
    return GranuleResult(url=url, sidecar=sidecar, status="ok", n_chunks=os.getpid())


def env_task(url: str, sidecar: str, options: object, listed: object) -> GranuleResult:
    """Reports the worker's AWS endpoint variable."""
    return GranuleResult(url=url, sidecar=sidecar, status="ok",
                         name=os.environ.get("AWS_ENDPOINT_URL", "<unset>"))


def _tasks(urls: list[str]) -> list[Task]:
    return [Task(u, u + ".parq", (u, u + ".parq", None, None)) for u in urls]


def test_process_pool_isolates_a_crashing_granule() -> None:
    urls = [f"/g{i}" for i in range(6)] + ["/x-crash", "/y-bug"]
    results = {r.url: r for r in run_tasks(fake_index, _tasks(urls), "process", workers=2)}
    assert set(results) == set(urls)  # every task has exactly one result
    crashed, bug = results.pop("/x-crash"), results.pop("/y-bug")
    assert crashed.status == "failed" and crashed.error is not None
    assert crashed.error.kind == "worker_crashed" and "/x-crash" in crashed.error.message
    assert bug.status == "failed" and bug.error is not None
    assert bug.error.kind == "bug" and "boom" in bug.error.message
    assert all(r.status == "ok" for r in results.values())
    assert all(r.n_chunks != os.getpid() for r in results.values())  # ran in workers


def test_serial_and_caller_executors() -> None:
    urls = ["/a", "/b-bug", "/c"]
    serial = {r.url: r for r in run_tasks(fake_index, _tasks(urls), "serial", workers=1)}
    assert serial["/a"].n_chunks == os.getpid() and serial["/b-bug"].error.kind == "bug"
    with ThreadPoolExecutor(2) as ex:
        threaded = {r.url: r.status for r in run_tasks(fake_index, _tasks(urls), ex, workers=2)}
    assert threaded == {"/a": "ok", "/b-bug": "failed", "/c": "ok"}
    with pytest.raises(ValueError, match="executor"):
        list(run_tasks(fake_index, _tasks(urls), "threads", workers=1))  # type: ignore[arg-type]


def test_workers_never_fork() -> None:
    # forked workers would share the parent's fsspec/s3fs event loops and connections
    pool = process_pool(1)
    try:
        assert pool._mp_context.get_start_method() in {"forkserver", "spawn"}
    finally:
        pool.shutdown()


def test_workers_see_the_callers_current_aws_environment(monkeypatch) -> None:
    # the fork server may have started before this variable was set: workers must still see it
    list(run_tasks(env_task, _tasks(["/warm"]), "process", workers=1))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    res = list(run_tasks(env_task, _tasks(["/a"]), "process", workers=1))
    assert res[0].name == "http://127.0.0.1:9"
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    res = list(run_tasks(env_task, _tasks(["/b"]), "process", workers=1))
    assert res[0].name == "<unset>"


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_tasks_are_taken_as_the_executor_has_room(executor: str) -> None:
    # a million tasks are never listed at once: run_tasks takes them from the iterator as a
    # worker has room (a window of a few per worker), so the caller can produce them lazily
    taken: list[str] = []

    def tasks():  # type: ignore[no-untyped-def]
        for i in range(200):
            taken.append(f"/g{i}")
            yield from _tasks([f"/g{i}"])

    results = run_tasks(fake_index, tasks(), executor, workers=2)
    first = next(results)
    assert first.status == "ok" and len(taken) <= 5, len(taken)  # window 3, one looked ahead
    rest = list(results)
    assert sorted(r.url for r in [first, *rest]) == sorted(taken) and len(taken) == 200
