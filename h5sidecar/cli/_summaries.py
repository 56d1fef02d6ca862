"""The short forms of ``inspect`` and ``verify`` for granules of many variables.

An ATL03 granule holds about 935 variables: a row each scrolls the one line a newcomer wants
(what is there, did it pass) off the screen.  Above :data:`SUMMARY_ABOVE` rows the commands
print one row per top-level group instead, and every variable with a problem by itself;
``--all`` prints every row, ``--json`` every record.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.markup import escape
from rich.table import Table

from h5sidecar.cli._output import size

__all__ = ["SUMMARY_ABOVE", "inspect_summary", "verify_summary"]

#: Variables (rows) above which ``inspect`` and ``verify`` summarise unless given ``--all``.
SUMMARY_ABOVE = 50


def _top(path: str) -> str:
    """``gt1l/heights/h_ph`` -> ``gt1l``; a root variable is its own row, ``/``."""
    return path.split("/", 1)[0] if "/" in path else "/"


def _by_group(rows: Iterable[Any]) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for r in rows:
        groups.setdefault(_top(r.path), []).append(r)
    return dict(sorted(groups.items()))


def inspect_summary(variables: Iterable[Any]) -> Table:
    """One row per top-level group: variables by status, chunks, bytes and codecs."""
    table = Table(title="per top-level group (--all: every variable)", header_style="bold")
    for col in ("group", "variables", "virtual", "inlined", "stored", "inline", "bytes",
                "codecs"):
        table.add_column(col, justify="left" if col in ("group", "codecs") else "right")
    for group, rows in _by_group(v for v in variables if v.status != "skipped").items():
        codecs = sorted({c for v in rows for c in v.codecs})
        table.add_row(
            escape(group), str(len(rows)), str(sum(v.status == "virtual" for v in rows)),
            str(sum(v.status == "inlined" for v in rows)), str(sum(v.n_stored for v in rows)),
            str(sum(v.n_inline for v in rows)),
            size(sum(v.stored_bytes + v.inline_bytes for v in rows)), ",".join(codecs) or "-")
    return table


def verify_summary(variables: Iterable[Any]) -> Table:
    """One row per top-level group: variables by result and chunks checked."""
    table = Table(title="per top-level group (--all: every variable)", header_style="bold")
    for col in ("group", "variables", "ok", "skipped", "problems", "chunks"):
        table.add_column(col, justify="left" if col == "group" else "right")
    for group, rows in _by_group(variables).items():
        bad = sum(v.status in ("different", "error") for v in rows)
        table.add_row(
            escape(group), str(len(rows)), str(sum(v.status == "ok" for v in rows)),
            str(sum(v.status == "skipped" for v in rows)), f"[red]{bad}[/]" if bad else "0",
            f"{sum(v.chunks_checked for v in rows)}/{sum(v.chunks_total for v in rows)}")
    return table
