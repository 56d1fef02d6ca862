"""The standard library's private names: ``ProcessPoolExecutor._processes``.

:func:`kill_pool_workers` ends a process pool's workers now.  Python 3.14 has the public
``ProcessPoolExecutor.kill_workers()``, used there; before it, the pool's ``_processes``
mapping (pid -> ``multiprocessing.Process``, present in CPython 3.8-3.14) is the only handle
on them.  Verified on CPython 3.11 (``tests/test_compat.py``).
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor

__all__ = ["kill_pool_workers"]


def kill_pool_workers(pool: ProcessPoolExecutor) -> None:
    """Kill ``pool``'s worker processes now (their tasks are abandoned)."""
    if sys.version_info >= (3, 14):
        pool.kill_workers()  # type: ignore[attr-defined,unused-ignore]
        return
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        if proc.is_alive():
            proc.kill()
