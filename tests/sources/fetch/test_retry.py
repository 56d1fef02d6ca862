"""The one retry policy (sources/fetch/_retry.py) and which store failures it retries."""

from __future__ import annotations

import asyncio

import pytest

from h5sidecar.errors import SourceReadError, StaleReferenceError
from h5sidecar.sources.fetch._retry import MAX_BACKOFF, backoff_delay, retrying
from h5sidecar.sources.stores._backends import transient_store_error


class _Flaky:
    """Fails with ``errors`` in turn, then returns ``"ok"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.calls = list(errors), 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def _run(attempt: _Flaky, retries: int) -> tuple[str, list[int]]:
    seen: list[int] = []
    result = asyncio.run(
        retrying(
            attempt,
            retries=retries,
            backoff=0.0,
            retry_if=transient_store_error,
            on_retry=lambda exc, n: seen.append(n),
        )
    )
    return result, seen


def test_transient_failures_are_retried_and_counted() -> None:
    attempt = _Flaky(ConnectionResetError("reset"), TimeoutError("slow"))
    assert _run(attempt, retries=2) == ("ok", [0, 1])
    assert attempt.calls == 3


def test_the_last_failure_is_raised_when_retries_run_out() -> None:
    attempt = _Flaky(*(ConnectionResetError(f"reset {i}") for i in range(5)))
    with pytest.raises(ConnectionResetError, match="reset 2"):
        _run(attempt, retries=2)
    assert attempt.calls == 3


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError("gone"),
        StaleReferenceError("changed", url="s3://b/k"),
        SourceReadError("denied", url="s3://b/k"),
        KeyError("not a store error"),
    ],
)
def test_final_failures_are_not_retried(error: Exception) -> None:
    attempt = _Flaky(error)
    with pytest.raises(type(error)):
        _run(attempt, retries=4)
    assert attempt.calls == 1


def test_backoff_is_full_jitter_within_the_cap() -> None:
    delays = [backoff_delay(3, 0.1) for _ in range(200)]
    assert all(0.0 <= d <= 0.8 for d in delays) and max(delays) > 0.4  # spread, not fixed
    assert all(0.0 <= backoff_delay(40, 1.0) <= MAX_BACKOFF for _ in range(50))
