"""What the fetch executor refuses before any I/O: settings that would deadlock or loop, and
planned ranges outside the allow-list, longer than ``max_range_bytes`` or past the end a
sidecar recorded for their source (a corrupt or hostile sidecar must not make us read
gigabytes, or bytes that are not its granule's)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.settings import ReadSettings
from h5sidecar.sources._allow import AllowList
from h5sidecar.sources.fetch._plan import ReadPlan

__all__ = ["check_plan", "check_read_settings"]


def check_read_settings(s: ReadSettings) -> None:
    """Refuse settings that would deadlock or loop (e.g. a semaphore of 0).

    Raises
    ------
    ValueError
        Naming every wrong setting and its value.
    """
    bad = {
        "max_concurrency": s.max_concurrency < 1,
        "max_small_concurrency": s.max_small_concurrency < 1,
        "max_request": s.max_request < 1,
        "max_range_bytes": s.max_range_bytes < 1,
        "max_gap": s.max_gap < 0,
        "retries": s.retries < 0,
        "backoff": not s.backoff >= 0,
        "revalidate_seconds": not s.revalidate_seconds >= 0,
        "request_timeout": not s.request_timeout > 0,
        "subchunk_fraction": not 0 <= s.subchunk_fraction <= 1,
    }
    wrong = [name for name, is_bad in bad.items() if is_bad]
    if wrong:
        values = ", ".join(f"{n}={getattr(s, n)!r}" for n in wrong)
        raise ValueError(
            f"invalid read settings: {values}; counts and sizes must be positive (max_gap, "
            "retries and backoff may be 0; subchunk_fraction is between 0 and 1). Check the H5SIDECAR_* environment variables."
        )


def check_plan(
    plan: ReadPlan,
    offsets: np.ndarray,
    lengths: np.ndarray,
    *,
    allow_list: AllowList,
    max_range_bytes: int,
    size_of: Callable[[str], int],
) -> None:
    """Refuse a plan of ``offsets``/``lengths`` before any of it is fetched.

    Parameters
    ----------
    plan : ReadPlan
        The plan of the ranges (its URLs, and which span holds each range).
    offsets, lengths : numpy.ndarray
        The ranges, in input order.
    allow_list : AllowList
        Which URLs may be fetched at all.
    max_range_bytes : int
        The longest range a reference may ask for.
    size_of : callable
        A URL -> its size recorded at index time (negative: unknown).

    Raises
    ------
    ForbiddenSourceError
        A URL is outside the allow-list.
    InvalidReferenceError
        A range is longer than ``max_range_bytes`` or lies past its source's recorded end.
    """
    for url in plan.urls:
        allow_list.check(url)
    limit = max_range_bytes
    if lengths.size and int(lengths.max()) > limit:
        i = int(np.argmax(lengths))
        raise InvalidReferenceError(
            f"range {i} of {plan.range_length.size} asks for {int(lengths[i])} bytes, more "
            f"than max_range_bytes={limit}; the reference looks corrupt (re-index the "
            "granule) or raise H5SIDECAR_MAX_RANGE_BYTES"
        )
    sizes = np.array(
        [size_of(u) for u in plan.urls] or [0], dtype=np.float64
    )  # float: -1 / unknown sizes are inf below
    sizes[sizes < 0] = np.inf
    ends = offsets + lengths
    live = plan.range_span >= 0
    if live.any():
        url_of = plan.span_url[plan.range_span[live]]
        past = ends[live] > sizes[url_of]
        if past.any():
            i = int(np.flatnonzero(live)[np.argmax(past)])
            url = plan.urls[int(plan.span_url[plan.range_span[i]])]
            raise InvalidReferenceError(
                f"range [{int(offsets[i])}, {int(ends[i])}) lies past the end of {url} "
                f"({int(sizes[url_of][np.argmax(past)])} bytes when indexed); the sidecar "
                "is corrupt: re-index the granule"
            )
