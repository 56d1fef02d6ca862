"""The package's one bridge from synchronous code to its asynchronous core: fsspec's I/O loop.

DESIGN rule 6: one async core, one sync bridge, no third event loop.  fsspec already runs a
daemon thread with an event loop (``fsspec.asyn.get_loop()``) that every async filesystem
(s3fs, HTTP) and our fetcher share; blocking callers hand coroutines to it through
:func:`run_sync`.  Both names used here are fsspec's public API (``fsspec.asyn.sync`` and
``fsspec.asyn.get_loop`` are in its API reference); no private fsspec name is used.

zarr runs a loop of its own (``zarr.core.sync``) for its synchronous API; the package leaves
that loop to zarr and never schedules its own work there (an Icechunk store's coroutines run
on any loop, so writing a repository goes through :func:`run_sync` too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import fsspec.asyn

__all__ = ["io_loop", "run_sync"]


def io_loop() -> asyncio.AbstractEventLoop:
    """fsspec's I/O event loop (started on first use, in its own daemon thread)."""
    return fsspec.asyn.get_loop()


def run_sync(coro_fn: Callable[..., Any], *args: Any, loop: asyncio.AbstractEventLoop | None = None,
             timeout: float | None = None, **kwargs: Any) -> Any:
    """Run ``coro_fn(*args, **kwargs)`` on fsspec's I/O loop and return its result (blocking).

    Parameters
    ----------
    coro_fn : callable
        An ``async def`` function (or any callable returning an awaitable).
    *args, **kwargs
        Its arguments.
    loop : asyncio.AbstractEventLoop, optional
        The loop to run on: a filesystem's own ``fs.loop`` (the same fsspec loop unless the
        filesystem was made with another); fsspec's I/O loop by default.
    timeout : float, optional
        Seconds to wait before raising ``fsspec.exceptions.FSTimeoutError``.

    Raises
    ------
    NotImplementedError
        From fsspec, when called from the loop's own thread (it would deadlock).
    """
    return fsspec.asyn.sync(loop or io_loop(), coro_fn, *args, timeout=timeout, **kwargs)
