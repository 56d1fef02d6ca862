"""The sources the gateway may read of a DEST served from a listing: those its run report names.

An earlier version's ``_report.json`` (a DEST with a record, local or in parts, is served
from that record, its sources looked up there): the source root of every run merged into it
and the source of every granule indexed successfully, all held.
"""

from __future__ import annotations

import json
from typing import Any

from h5sidecar.dest import source_roots
from h5sidecar.errors import InvalidReferenceError, SourceReadError

__all__ = ["REPORT_NAME", "report_sources"]

REPORT_NAME = "_report.json"


def report_sources(fs: Any, root: str, dest: str) -> tuple[tuple[str, ...], bool]:
    """The sources DEST's ``_report.json`` allows, and whether DEST has one."""
    path = f"{root}/{REPORT_NAME}"
    try:
        raw = fs.cat_file(path)
    except FileNotFoundError:
        return (), False
    except OSError as exc:
        raise SourceReadError(f"reading {dest}/{REPORT_NAME} failed: {exc}") from exc
    try:
        report = json.loads(raw)
        # every source root an index run read (merged reports accumulate them): a run
        # interrupted before it reached a granule must not lock out its good sidecar
        roots = source_roots(report.get("roots") or (), report.get("source"),
                             report.get("options") or {})
        sources = [r for r in roots if isinstance(r, str) and r]
        for g in report.get("granules", []):
            if g.get("status") not in ("ok", "up_to_date"):
                continue
            src = (g.get("source") or {}).get("url") or g.get("url")
            if isinstance(src, str) and src:
                sources.append(src)
    except (ValueError, AttributeError, TypeError) as exc:
        raise InvalidReferenceError(
            f"the run report {dest}/{REPORT_NAME} is malformed ({exc}): re-run "
            "`h5sidecar index` into DEST, or pass the source prefixes with --allow"
        ) from exc
    return tuple(dict.fromkeys(sources)), True
