"""mkdocs hook: the command-line reference generated from ``h5sidecar.cli``'s parser.

``reference/cli.md`` holds a ``<!-- cli-options: COMMAND -->`` marker in each command's
section (``h5sidecar`` for the global options; ``cache list`` for a nested subcommand, one
marker per level); the hook replaces it with that command's usage,
description and every option with its help and default, read from the parser at build time, so
the page cannot drift from the CLI.  A command without a marker, or a marker naming no command,
fails the build: a new command needs its section.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from typing import Any

_MARKER = re.compile(r"^<!-- cli-options: ([\w-]+(?: [\w-]+)*) -->$", re.MULTILINE)
_PAGE = "reference/cli.md"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public walk of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every subcommand at every depth, keyed by its words (``"cache"``, ``"cache list"``)."""
    found: dict[str, argparse.ArgumentParser] = {}
    for name, sub in _subcommands(parser).items():
        found[prefix + name] = sub
        found.update(commands(sub, f"{prefix}{name} "))
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | default | what it does |", "| --- | --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else " " + (
                action.metavar if isinstance(action.metavar, str) else action.dest.upper())
            name = ", ".join(f"`{o}{metavar}`" for o in action.option_strings)
        else:
            name = f"`{action.metavar if isinstance(action.metavar, str) else action.dest.upper()}`"
        if action.choices is not None and not isinstance(action.choices, dict):
            choices = " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
        else:
            choices = ""
        default = action.default
        # identity, not equality: a default of 0 is shown, False (a flag's) is not
        shown = "" if any(default is v for v in (None, False, argparse.SUPPRESS)) else f"`{default}`"
        if action.required:
            shown = "required"
        help_text = (action.help or "") % {"default": default, "prog": parser.prog} \
            if action.help and "%(" in action.help else (action.help or "")
        rows.append(f"| {name} | {shown} | {_cell(help_text)}{choices} |")
    return rows


def _block(parser: argparse.ArgumentParser) -> str:
    # argparse indents continuation lines under the text after "usage: ", which is dropped here
    usage = textwrap.dedent(" " * len("usage: ") + parser.format_usage().removeprefix("usage: "))
    usage = usage.strip()
    lines = ['??? info "Usage and every option (generated from the parser)"', "",
             "    ```text", *("    " + u for u in usage.splitlines()), "    ```", ""]
    if parser.description:
        lines += ["    " + " ".join(parser.description.split()), ""]
    lines += ["    " + row for row in _option_rows(parser)]
    if parser.epilog:
        lines += ["", "    " + " ".join(parser.epilog.split())]
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != _PAGE:
        return markdown
    from h5sidecar.cli import build_parser

    root = build_parser()
    parsers = {"h5sidecar": root, **commands(root)}
    marked = _MARKER.findall(markdown)
    unknown = sorted(set(marked) - set(parsers))
    missing = sorted(set(parsers) - set(marked))
    if unknown or missing:
        raise ValueError(f"{_PAGE}: markers naming no command {unknown}; commands without a "
                         f"`<!-- cli-options: COMMAND -->` marker {missing}")
    return _MARKER.sub(lambda m: _block(parsers[m.group(1)]), markdown)
