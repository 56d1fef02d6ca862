"""The ``h5sidecar`` command as a subprocess that always receives Ctrl-C.

A process started in the background by a non-interactive shell inherits SIGINT ignored, and
Python then installs no KeyboardInterrupt handler: a test run launched that way (``cmd &``)
would see the CLI shrug off the SIGINT the interrupt tests send.  This launcher restores
Python's handler first, then runs the same entry point as the installed ``h5sidecar`` script.
"""

from __future__ import annotations

import sys

_LAUNCH = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from h5sidecar.cli import main; sys.exit(main())"
)


def h5sidecar_command(*args: str) -> list[str]:
    """``argv`` running ``h5sidecar ARGS...`` with Ctrl-C (SIGINT) delivered as in a terminal."""
    return [sys.executable, "-c", _LAUNCH, *args]
