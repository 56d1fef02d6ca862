"""The command line's dispatch: parse, pick the command, map errors to exit codes."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from h5sidecar.cli._args import build_parser, storage_options
from h5sidecar.cli._cache_commands import cmd_cache
from h5sidecar.cli._commands import (
    cmd_catalog,
    cmd_cube,
    cmd_demo,
    cmd_dmrpp_check,
    cmd_inspect,
    cmd_prune,
    cmd_sample,
    cmd_serve,
    cmd_verify,
)
from h5sidecar.cli._exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from h5sidecar.cli._index_commands import cmd_index, cmd_report
from h5sidecar.cli._output import cli_logging
from h5sidecar.errors import H5SidecarError

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main",
           "storage_options"]


log = logging.getLogger("h5sidecar")

#: Line width of tables when stdout is not a terminal.
_PIPE_WIDTH = 240


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    args = build_parser().parse_args(argv)
    args.verbose += args.verbose_global  # -v before or after the command
    # piped output: long paths stay on one line (greppable) and tables are not squeezed to 80
    # columns; on a terminal rich fits the terminal
    width = None if sys.stdout.isatty() else _PIPE_WIDTH
    out, err = Console(soft_wrap=True, width=width), Console(stderr=True, soft_wrap=True)
    with cli_logging(args.verbose, err):
        return _run(args, out, err)


def _run(args: argparse.Namespace, out: Console, err: Console) -> int:
    try:
        return int(_COMMANDS[args.command](args, out, err))
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]")
        return EXIT_INTERRUPTED
    except (H5SidecarError, OSError) as exc:
        # bad input or an unusable destination (missing, not a folder, not writable): say
        # what, without a traceback (-vv logs one)
        log.debug("command failed", exc_info=True)
        # escaped: 'pip install "h5sidecar[gateway]"' would otherwise lose its [gateway] to
        # rich's markup
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return EXIT_USAGE


_COMMANDS = {
    "index": cmd_index,
    "inspect": cmd_inspect,
    "verify": cmd_verify,
    "dmrpp-check": cmd_dmrpp_check,
    "catalog": cmd_catalog,
    "cube": cmd_cube,
    "prune": cmd_prune,
    "report": cmd_report,
    "sample": cmd_sample,
    "demo": cmd_demo,
    "serve": cmd_serve,
    "cache": cmd_cache,
}
