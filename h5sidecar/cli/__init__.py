"""``h5sidecar`` command line: a thin shell over :mod:`h5sidecar.workflows`.

Each command parses its arguments, calls one library function and prints the result with rich
(tables on stdout; progress and logs on stderr, so ``--json`` output can be piped).

Exit codes: 0 success; 1 something failed or differed (a granule failed to index, ``verify``
found a difference); 2 bad usage or input (no such source or sidecar, malformed sidecar);
130 interrupted.

The parser (one for every command) is in :mod:`._args`, logs, progress and sizes in
:mod:`._output`, the ``index`` and ``report`` commands in :mod:`._index_commands` and the others
in :mod:`._commands`; :mod:`._main` dispatches.
"""

from h5sidecar.cli._args import build_parser, storage_options
from h5sidecar.cli._main import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, main

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main",
           "storage_options"]
