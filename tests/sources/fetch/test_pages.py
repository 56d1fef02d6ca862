"""The page cache of the ranged reader and the page runs that fill it (one coalescing algorithm:
the planner's)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from h5sidecar.sources.fetch._pages import PAGE, PageCache, page_runs, run_holding


def test_page_cache_is_bounded_and_serves_exact_bytes() -> None:
    cache = PageCache(limit=3 * PAGE)
    blob = bytes(range(256)) * 64  # 16 KiB
    cache.put(0, blob[: 2 * PAGE])
    assert cache.read(10, 5000) == blob[10:5000]
    cache.put(2 * PAGE, blob[2 * PAGE : 4 * PAGE])  # over the limit: the oldest block goes
    assert cache.read(0, 10) is None
    assert cache.read(2 * PAGE + 3, 4 * PAGE) == blob[2 * PAGE + 3 : 4 * PAGE]


@pytest.mark.parametrize("seed", range(5))
def test_page_runs_cover_every_page_within_limits(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pages = sorted(set(rng.integers(0, 2000, 300).tolist()))
    runs = page_runs(pages, max_gap=8 * PAGE, max_request=40 * PAGE)
    covered = [p for first, last in runs for p in range(first, last + 1)]
    assert set(pages) <= set(covered) and len(covered) == len(set(covered))
    assert all((last - first + 1) * PAGE <= 40 * PAGE for first, last in runs)
    assert all(b[0] - a[1] - 1 > 8 or (b[0] - a[0] + 1) > 40 for a, b in itertools.pairwise(runs))
    assert all(first in pages and last in pages for first, last in runs)


@pytest.mark.parametrize("seed", range(20))
def test_page_runs_never_bridge_a_refused_gap_and_run_holding_agrees(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pages = sorted(set(rng.integers(0, 3000, 400).tolist()))
    taken = set(rng.integers(0, 3000, 60).tolist()) - set(pages)

    def bridgeable(first: int, last: int) -> bool:
        return not any(p in taken for p in range(first, last + 1))

    runs = page_runs(pages, max_gap=12 * PAGE, max_request=32 * PAGE, bridgeable=bridgeable)
    covered = [p for first, last in runs for p in range(first, last + 1)]
    assert sorted(set(pages)) == sorted(set(covered) & set(pages))
    assert not set(covered) & taken  # a cached or coming page is never fetched again
    assert all((last - first + 1) <= 32 for first, last in runs)
    for page in rng.choice(pages, 20).tolist():
        expected = next(r for r in runs if r[0] <= page <= r[1])
        assert run_holding(pages, page, 12 * PAGE, 32 * PAGE, bridgeable) == expected
