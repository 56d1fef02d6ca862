"""What the ``h5sidecar`` command line prints besides its tables: logs, progress, sizes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["ProgressBar", "cli_logging", "shape", "size"]

log = logging.getLogger("h5sidecar")


@contextmanager
def cli_logging(verbose: int, console: Console) -> Iterator[None]:
    """Log to ``console`` while a command runs, then put logging back as it was.

    ``main`` may run in-process (tests, notebooks, a user's script): the root logger's handlers
    and levels must not outlive the command, or every later log record of the process (another
    library's threads too) would go through a console made for one command.
    """
    level = logging.WARNING if not verbose else logging.INFO if verbose == 1 else logging.DEBUG
    root = logging.getLogger()
    saved = root.handlers[:], root.level, log.level
    # the progress bar's console: rich then prints log records above the live bar
    handler = RichHandler(console=console, show_path=False)
    logging.basicConfig(level=level, handlers=[handler], format="%(message)s", force=True)
    log.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
        log.setLevel(saved[2])


class ProgressBar:
    """A rich progress bar fed by :func:`index_many` (implements ``ProgressSink``)."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[bold]indexing"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=console, transient=False,
        )
        self._task: Any = None
        self._counts = {"ok": 0, "up_to_date": 0, "failed": 0}

    def __enter__(self) -> Self:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def start(self, total: int) -> None:
        self._task = self._progress.add_task("index", total=total, status="")

    def advance(self, result: Any) -> None:
        self._counts[result.status] += 1
        c = self._counts
        status = f"ok {c['ok']}  up-to-date {c['up_to_date']}  failed {c['failed']}"
        self._progress.update(self._task, advance=1, status=status)



def shape(shape: tuple[int, ...]) -> str:
    return str(tuple(shape))


def size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"

