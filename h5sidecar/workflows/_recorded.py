"""What an existing sidecar records about its source, read cheaply for change detection.

Deciding whether a granule is up to date must not cost as much as indexing it: loading a whole
Parquet sidecar of a ~1000-variable granule (every ``refs.N.parq``) takes seconds, while its
source identity sits in one small JSON document.  So we read only the h5sidecar extras block:
the top-level ``"h5sidecar"`` key of ``.zmetadata`` (Parquet; written last, so its presence
also means the sidecar is complete) or of the JSON sidecar.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from h5sidecar.errors import InvalidReferenceError
from h5sidecar.references import SourceInfo
from h5sidecar.workflows._listing import filesystem

__all__ = ["Recorded", "read_recorded"]

log = logging.getLogger("h5sidecar.workflows")

#: Top-level key of the extras block in both sidecar formats (kerchunk readers ignore it).
EXTRAS_KEY = "h5sidecar"


@dataclass(frozen=True, slots=True)
class Recorded:
    """The source identity and variable statuses a sidecar records."""

    source: SourceInfo
    n_virtual: int
    n_inlined: int
    skipped: tuple[Mapping[str, str], ...]


def read_recorded(
    sidecar: str, *, storage_options: Mapping[str, Any] | None = None
) -> Recorded | None:
    """Read the recorded identity of ``sidecar``; None when absent, incomplete or unreadable.

    ``None`` means "index it (again)": no sidecar, a Parquet directory without its commit
    marker (an interrupted object-store write), a sidecar written by another tool (no extras),
    or a malformed one.
    """
    fs = filesystem(sidecar, storage_options)
    target = f"{sidecar.rstrip('/')}/.zmetadata" if sidecar.endswith(".parq") else sidecar
    try:
        raw = fs.cat_file(target)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    try:
        return _parse(json.loads(raw))
    except (ValueError, KeyError, TypeError, AttributeError, InvalidReferenceError) as exc:
        log.warning("sidecar %s is unreadable (%s): it will be rewritten", sidecar, exc)
        return None


def _parse(doc: Mapping[str, Any]) -> Recorded | None:
    extras = doc.get(EXTRAS_KEY)
    if extras is None:
        return None  # not written by h5sidecar: no identity to trust
    statuses = [a.get("status", "virtual") for a in extras.get("arrays", {}).values()]
    skipped = tuple(
        {"path": str(s["path"]), "kind": str(s["kind"]), "reason": str(s["reason"])}
        for s in extras.get("skipped", ())
    )
    return Recorded(
        source=SourceInfo.from_dict(extras["source"]),
        n_virtual=statuses.count("virtual"),
        n_inlined=statuses.count("inlined"),
        skipped=skipped,
    )
