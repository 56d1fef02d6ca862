"""Where a cube's parts are: ``OUT`` itself, or ``OUT-0``, ``OUT-1``, ... of a split.

A split build writes ``OUT-0``, ``OUT-1``, ... (:func:`~h5sidecar.workflows.cube_paths`); an
append that splits off a new encoding adds the next index after the existing parts, so a
single cube ``OUT`` may be followed by ``OUT-1``, ``OUT-2``, ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from h5sidecar.errors import InvalidRequestError
from h5sidecar.workflows._cube import cube_paths

__all__ = ["existing_parts", "part_path"]


def part_path(out: str, i: int) -> str:
    """Path of split cube ``i`` (``OUT-i``); see :func:`~h5sidecar.workflows.cube_paths`."""
    return cube_paths(out, i + 2)[i]


def _exists(path: str, format: str, opts: Mapping[str, Any]) -> bool:
    if format == "icechunk":
        import icechunk as ic

        from h5sidecar.workflows._icechunk_repo import _storage

        return bool(ic.Repository.exists(_storage(path, opts)))
    import fsspec

    fs, p = fsspec.core.url_to_fs(path, **opts)
    return bool(fs.exists(p))


def existing_parts(out: str, format: str, opts: Mapping[str, Any]) -> list[str]:
    """The cubes at ``out``: ``out`` itself (then ``OUT-1``, ... added by split appends), or
    ``OUT-0``, ``OUT-1``, ... (a split build)."""
    whole = _exists(out, format, opts)
    if whole and _exists(part_path(out, 0), format, opts):
        raise InvalidRequestError(
            f"both {out} and {part_path(out, 0)} exist: which cubes to append to is ambiguous; "
            "remove the one no longer wanted"
        )
    found, i = ([out], 1) if whole else ([], 0)
    while _exists(part_path(out, i), format, opts):
        found.append(part_path(out, i))
        i += 1
    return found
