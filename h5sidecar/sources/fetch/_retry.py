"""The one retry policy of the package: a bounded number of attempts, exponential backoff with
full jitter.

Both fetch paths use it -- the read path's executor (:class:`~h5sidecar.sources.fetch._chunk_fetcher.
ChunkFetcher`) and the indexer's ranged reader (:class:`~h5sidecar.sources.fetch._pinned.
PinnedFetcher`) -- and both build their obstore clients with the client's own retries off
(:data:`~h5sidecar.sources.stores._backends.NO_RETRY`).  Retrying here rather than inside obstore keeps
one policy in one place, counts every repeated attempt (``FetchStats.retries``), and lets each
caller decide what is worth retrying (throttling, 5xx, resets, timeouts, short bodies) and what is
not (a missing object, a failed ``If-Match``, denied access).  tenacity could express the same
policy (its ``wait_random_exponential`` is full jitter); these forty lines cost less than a
dependency.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["MAX_BACKOFF", "backoff_delay", "retrying"]

T = TypeVar("T")

#: Upper bound of one backoff sleep (seconds), whatever the attempt number.
MAX_BACKOFF = 20.0


def backoff_delay(attempt: int, base: float) -> float:
    """Seconds to sleep after failed attempt ``attempt`` (0-based).

    "Full jitter": uniform in ``[0, min(MAX_BACKOFF, base * 2**attempt)]``, so clients that
    failed together do not retry together.
    """
    return random.uniform(0.0, min(MAX_BACKOFF, base * 2**attempt))


async def retrying(
    attempt: Callable[[], Awaitable[T]],
    *,
    retries: int,
    backoff: float,
    retry_if: Callable[[Exception], bool],
    on_retry: Callable[[Exception, int], None] | None = None,
) -> T:
    """Await ``attempt()`` until it succeeds, at most ``retries + 1`` times.

    Parameters
    ----------
    attempt : callable
        Makes one attempt (a fresh awaitable per call).
    retries : int
        Attempts after the first.
    backoff : float
        Base of :func:`backoff_delay`, in seconds.
    retry_if : callable
        Whether a failure is worth another attempt; any other exception propagates at once.
    on_retry : callable, optional
        Called as ``on_retry(exc, n)`` before sleeping after failed attempt ``n`` (to count or
        log it); not called after the last attempt.

    Returns
    -------
    The result of the first successful attempt.

    Raises
    ------
    Exception
        The last failure, once retries run out (or any failure ``retry_if`` refuses).
    """
    for n in range(retries + 1):
        try:
            return await attempt()
        except Exception as exc:
            if n >= retries or not retry_if(exc):
                raise
            if on_retry is not None:
                on_retry(exc, n)
            await asyncio.sleep(backoff_delay(n, backoff))
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
