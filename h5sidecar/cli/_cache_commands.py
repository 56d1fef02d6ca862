"""The ``cache`` command: list and prune the record cache of object-store DESTs."""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from h5sidecar.cli._args import record_settings
from h5sidecar.cli._exit_codes import EXIT_OK, EXIT_USAGE
from h5sidecar.cli._output import size as _size


def cmd_cache(args: argparse.Namespace, out: Console, err: Console) -> int:
    from h5sidecar.dest import list_cache, prune_cache_files

    settings = record_settings(args)
    folder = settings.cache_folder()
    if folder is None:
        err.print("[red]error:[/] the record cache is off (H5SIDECAR_RECORD_CACHE is empty): "
                  "give its folder with --record-cache DIR")
        return EXIT_USAGE
    if args.action == "prune":
        days = settings.record_cache_max_age_days if args.older_than is None else args.older_than
        files = prune_cache_files(folder, days)
        verb = f"removed (not used for {days:g} days)"
    else:
        files, verb = list_cache(folder), "in"
    if args.json:
        out.print_json(data={"folder": folder, "files": [f.to_dict() for f in files]})
        return EXIT_OK
    if files:
        table = Table(header_style="bold")
        for col in ("DEST", "size", "last used", "file"):
            table.add_column(col, justify="right" if col == "size" else "left")
        for f in files:
            table.add_row(escape(f.dest or "(not known yet)"), _size(f.size),
                          time.strftime("%Y-%m-%d %H:%M", time.localtime(f.last_used)),
                          escape(f.path))
        out.print(table)
    total = sum(f.size for f in files)
    out.print(f"{len(files)} cache file(s), {_size(total)}, {verb} {escape(folder)}")
    return EXIT_OK
