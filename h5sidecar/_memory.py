"""Memory a large transient freed, given back to the system: what the decode of a large
cube's manifests (:mod:`h5sidecar.references.parquet_sidecar._parquet_lazy`) and a cube's
whole rewrite (:mod:`h5sidecar.workflows.cube._cube_append`) ask between their steps.

Arrow's pool (mimalloc) keeps the pages of freed buffers, and glibc's heap the arenas of
freed NumPy and Python objects, until asked: at a million members each held ~0.1-0.2 GB of
copies already dropped to the next step's peak.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

import pyarrow as pa

__all__ = ["give_back"]


def give_back(heap: bool = True) -> None:
    """Return what Arrow's pool holds freed and, with ``heap``, what glibc's heap does (as
    Dask's workers call ``malloc_trim``; nothing on other C libraries)."""
    pa.default_memory_pool().release_unused()
    if heap and _TRIM is not None:
        _TRIM(0)


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # another C library (musl)
        return None


_TRIM = _malloc_trim()
