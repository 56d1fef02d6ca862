"""Refuse a batch whose worker processes would run the user's script again.

Worker processes are started with forkserver or spawn (see ``_executors``): each imports the
parent's ``__main__`` script again, as ``__mp_main__``.  A script that calls ``index_many`` at
its top level, outside ``if __name__ == "__main__":``, makes every worker start a batch of its
own while it boots; multiprocessing refuses that, each worker dies with a long traceback, and
the batch reports every granule as "the worker process died".  The user then blames the data.
This module finds the case before any worker starts, in the parent, from the script's source,
and in a worker (should the parent not have seen it) from the import under way.  The same holds
for ``executor="serial"`` with a time limit (the default: its granules run one by one in a
worker process of ours), and for a script read from standard input (``python -``), which no
worker can import at all (multiprocessing looks for a file named ``<stdin>``).
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
from types import FrameType

from h5sidecar.errors import UnguardedMainError

__all__ = ["refuse_unguarded_main"]

_FIX = ('put the script\'s work under `if __name__ == "__main__":` (worker processes import '
        'the script again), or index in this process, one granule at a time: '
        'executor="serial" with settings=IndexSettings(max_granule_seconds=0) (no time limit)')


def refuse_unguarded_main(what: str = "index_many") -> None:
    """Raise :class:`UnguardedMainError` when worker processes would re-run the caller's script.

    Called by ``what`` before it starts worker processes.  Scripts run with ``python -c``,
    notebooks and interactive sessions have no ``__main__`` file to import again: never
    refused.  A script read from standard input names a file that does not exist
    (``<stdin>``), which every worker would fail to import: refused.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if (isinstance(path, str) and getattr(getattr(main, "__spec__", None), "name", None) is None
            and not os.path.exists(path) and multiprocessing.parent_process() is None):
        raise UnguardedMainError(
            f"{what} was called from a script read from standard input ({path}), which "
            f"worker processes cannot import: save it to a file and {_FIX}")
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if name == "__mp_main__" and multiprocessing.parent_process() is not None:
            # a worker importing the parent's script: the parent's check did not see it
            raise UnguardedMainError(f"{what} was called while a worker process imported the "
                                     f"script {frame.f_code.co_filename}: {_FIX}")
        if name == "__main__" and frame.f_code.co_name == "<module>":
            line = frame.f_lineno
            filename = frame.f_code.co_filename
            if not _guarded(filename, line):
                raise UnguardedMainError(
                    f"{what} is called at the top level of {filename} (line {line}), outside "
                    f'`if __name__ == "__main__":`: {_FIX}')
            return
        frame = frame.f_back


def _guarded(filename: str, line: int) -> bool:
    """Whether ``line`` of the script ``filename`` lies under a top-level ``if __name__ ==
    "__main__":`` (or cannot be told: no source, as for ``python -c``)."""
    try:
        with open(filename, "rb") as f:
            tree = ast.parse(f.read(), filename)
    except (OSError, SyntaxError, ValueError):
        return True  # no script file to import again (or nothing to tell): not ours to refuse
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_test(node.test):
            end = node.end_lineno or node.lineno
            if node.lineno <= line <= end:
                return True
    return False


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and texts == ["__main__"]
